//! Goal: well-formed frames reach the codec byte for byte, split however the
//! socket delivers them; each malformed one becomes exactly one Flush and
//! one coded rejection numbered by its position; impossible framing or a
//! malformed startup packet ends the stream with a fatal rejection.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
use super::*;
use tokio::io::AsyncReadExt;

fn startup() -> Vec<u8> {
    let mut body = 196_608_i32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0alice\0database\0default\0\0");
    framed(None, &body)
}

fn framed(message_type: Option<u8>, body: &[u8]) -> Vec<u8> {
    let mut frame: Vec<u8> = message_type.into_iter().collect();
    frame.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

fn query(sql: &[u8]) -> Vec<u8> {
    let mut body = sql.to_vec();
    body.push(0);
    framed(Some(b'Q'), &body)
}

/// Parse with `announced` parameter types of which `sent` are present.
fn parse(announced: i16, sent: usize) -> Vec<u8> {
    let mut body = b"\0SELECT $1\0".to_vec();
    body.extend_from_slice(&announced.to_be_bytes());
    for _ in 0..sent {
        body.extend_from_slice(&23_i32.to_be_bytes());
    }
    framed(Some(b'P'), &body)
}

/// Bind of one text parameter whose length field says `length`.
fn bind(length: i32, value: &[u8]) -> Vec<u8> {
    let mut body = b"\0\0".to_vec();
    body.extend_from_slice(&0_i16.to_be_bytes());
    body.extend_from_slice(&1_i16.to_be_bytes());
    body.extend_from_slice(&length.to_be_bytes());
    body.extend_from_slice(value);
    body.extend_from_slice(&0_i16.to_be_bytes());
    framed(Some(b'B'), &body)
}

fn sync() -> Vec<u8> {
    framed(Some(b'S'), &[])
}

/// What the codec reads from `stream`, delivered `chunk` bytes at a time,
/// and the rejections queued.
async fn guard(stream: &[u8], chunk: usize) -> (Vec<u8>, Vec<Rejection>) {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let reports = GuardReports::default();
    let mut guard = FrameGuard::new(server, BytesMut::new(), reports.clone());
    let write = async move {
        use tokio::io::AsyncWriteExt;
        for piece in stream.chunks(chunk) {
            client.write_all(piece).await.unwrap();
        }
        client.shutdown().await.unwrap();
        // Kept open until the reader is done.
        client
    };
    let read = async {
        let mut read = Vec::new();
        guard.read_to_end(&mut read).await.unwrap();
        read
    };
    let (client, read) = tokio::join!(write, read);
    drop(client);
    let queued = std::mem::take(&mut *reports.rejections());
    (read, queued.into_iter().collect())
}

fn concat(frames: &[Vec<u8>]) -> Vec<u8> {
    frames.concat()
}

#[tokio::test]
async fn well_formed_frames_pass_unchanged_however_they_are_split() {
    let stream = concat(&[
        startup(),
        query(b"SELECT 1"),
        parse(1, 1),
        bind(1, b"7"),
        bind(-1, b""),
        sync(),
        framed(Some(b'd'), b"1\t\xff\n"),
        framed(Some(b'c'), &[]),
        framed(Some(b'X'), &[]),
    ]);
    for chunk in [1, 3, 7, stream.len()] {
        let (read, rejections) = guard(&stream, chunk).await;
        assert_eq!(read, stream, "chunk {chunk}");
        assert!(rejections.is_empty(), "chunk {chunk}: {rejections:?}");
    }
}

#[tokio::test]
async fn a_malformed_frame_becomes_a_flush_and_a_numbered_rejection() {
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (parse(30_000, 0), "08P01", "insufficient data"),
        (bind(i32::MAX, b"abc"), "08P01", "insufficient data"),
        (bind(-7, b""), "08P01", "invalid length -7"),
        (query(b"SELECT '\xff'"), "22021", "0xff"),
        (bind(2, b"\xc3\x28"), "22021", "0xc3"),
        (
            framed(Some(b'Q'), b"no terminator"),
            "08P01",
            "invalid string",
        ),
        (framed(Some(b'S'), b"extra"), "08P01", "5 bytes after"),
        (framed(Some(b'D'), b"Xname\0"), "08P01", "target type"),
        (framed(Some(b'E'), b"\0\0\0"), "08P01", "insufficient data"),
    ];
    for (frame, sqlstate, message) in cases {
        let stream = concat(&[startup(), frame, query(b"SELECT 1")]);
        let (read, rejections) = guard(&stream, 2).await;
        assert_eq!(
            read,
            concat(&[startup(), FLUSH.to_vec(), query(b"SELECT 1")]),
            "{message}"
        );
        let [rejection] = rejections.as_slice() else {
            panic!("one rejection expected for {message}: {rejections:?}");
        };
        assert_eq!(rejection.frame, 1);
        assert_eq!(rejection.error.sqlstate(), sqlstate, "{}", rejection.error);
        assert!(
            rejection.error.to_string().contains(message),
            "{message} not in {}",
            rejection.error
        );
    }
}

#[tokio::test]
async fn impossible_framing_ends_the_stream_with_a_fatal_rejection() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            concat(&[startup(), b"Q\0\0\0\x02".to_vec(), query(b"SELECT 1")]),
            "invalid message length 2",
        ),
        (
            concat(&[startup(), b"Z\0\0\0\x04".to_vec()]),
            "message type 90",
        ),
        (
            concat(&[startup(), b"S\0\0\x30\0".to_vec()]),
            "invalid message length 12288",
        ),
        (b"\0\0\0\x03\0\0\0\0".to_vec(), "startup packet: 3 bytes"),
        (framed(None, b"\0\x03\0\0user\0al"), "invalid string"),
    ];
    for (stream, message) in cases {
        let (read, rejections) = guard(&stream, 4).await;
        let expected_frame = u64::from(stream.starts_with(&startup()));
        let expected = if expected_frame == 1 {
            startup()
        } else {
            Vec::new()
        };
        assert_eq!(read, expected, "{message}");
        let [rejection] = rejections.as_slice() else {
            panic!("one rejection expected for {message}: {rejections:?}");
        };
        assert_eq!(rejection.frame, expected_frame);
        assert!(
            rejection.error.to_string().contains(message),
            "{}",
            rejection.error
        );
    }
}

#[test]
fn rejections_are_taken_only_at_their_frame() {
    let reports = GuardReports::default();
    reports.push(Rejection {
        frame: 3,
        message_type: Some(b'P'),
        error: protocol_violation("bad".into()),
    });
    assert!(reports.take_rejection(2).is_none());
    assert!(reports.take_rejection(3).is_some());
    assert!(reports.take_rejection(3).is_none());
}

/// A small deterministic generator (SplitMix64), so a failure replays.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One well-formed frontend frame of a random kind.
fn valid_frame(random: &mut Random) -> Vec<u8> {
    match random.below(9) {
        0 => query(b"SELECT 1"),
        1 => parse(2, 2),
        2 => bind(3, b"abc"),
        3 => framed(Some(b'D'), b"Sname\0"),
        4 => framed(Some(b'C'), b"P\0"),
        5 => framed(Some(b'E'), b"\0\0\0\0\x05"),
        6 => framed(Some(b'd'), b"1\t2\n"),
        7 => framed(Some(b'f'), b"reason\0"),
        _ => sync(),
    }
}

/// `frame` damaged: bytes flipped, counts and lengths set to extremes,
/// the body cut or extended; the length field usually follows the body.
fn mutate(mut frame: Vec<u8>, random: &mut Random) -> Vec<u8> {
    for _ in 0..=random.below(3) {
        let position = 5 + random.below(frame.len().saturating_sub(5));
        match random.below(5) {
            0 if position < frame.len() => frame[position] = random.next() as u8,
            1 => {
                let extreme: [u8; 2] =
                    [[0, 0], [0xff, 0xff], [0x7f, 0xff], [0x80, 0], [0, 1]][random.below(5)];
                for (offset, byte) in extreme.into_iter().enumerate() {
                    if let Some(slot) = frame.get_mut(position + offset) {
                        *slot = byte;
                    }
                }
            }
            2 => frame.truncate(position.max(5)),
            3 => frame.extend((0..random.below(8)).map(|_| random.next() as u8)),
            _ => {
                let extreme = [0_i32, -1, i32::MAX, 30_000, 2][random.below(5)];
                for (offset, byte) in extreme.to_be_bytes().into_iter().enumerate() {
                    if let Some(slot) = frame.get_mut(position + offset) {
                        *slot = byte;
                    }
                }
            }
        }
    }
    if random.below(10) < 8 {
        let length = (frame.len() - 1) as u32;
        frame[1..5].copy_from_slice(&length.to_be_bytes());
    }
    frame
}

/// Goal (fuzz): whatever a client sends, every frame the guard passes is one
/// `pgwire` decodes without panicking, to a message that is exactly that
/// frame. Runs `ROCKSTREAM_FUZZ_FRAMES` damaged frames (20,000 by default;
/// more locally), seeded by `ROCKSTREAM_FUZZ_SEED`.
#[test]
fn every_frame_the_guard_passes_decodes_whole() {
    use pgwire::messages::{DecodeContext, PgWireFrontendMessage, ProtocolVersion};
    let setting = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let frames = setting("ROCKSTREAM_FUZZ_FRAMES", 20_000);
    let seed = setting("ROCKSTREAM_FUZZ_SEED", 17);
    let mut random = Random(seed);
    let mut context = DecodeContext::new(ProtocolVersion::PROTOCOL3_0);
    context.awaiting_frontend_ssl = false;
    context.awaiting_frontend_startup = false;
    let (mut passed, mut refused) = (0, 0);
    for _ in 0..frames {
        let frame = mutate(valid_frame(&mut random), &mut random);
        let whole = matches!(typed_header(&frame), Header::Frame(length) if length == frame.len());
        if !whole || check_typed(frame[0], &frame[5..]).is_err() {
            refused += 1;
            continue;
        }
        passed += 1;
        let mut buffer = BytesMut::from(&frame[..]);
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            PgWireFrontendMessage::decode(&mut buffer, &context)
        }));
        assert!(
            matches!(decoded, Ok(Ok(Some(_)))),
            "seed {seed}: {frame:?} passed the guard but decodes as {decoded:?}"
        );
        assert!(
            buffer.is_empty(),
            "seed {seed}: decoding {frame:?} left {} bytes",
            buffer.len()
        );
    }
    // The generator must exercise both sides, or the test proves nothing.
    assert!(
        passed > frames / 20 && refused > frames / 20,
        "{passed} passed, {refused} refused"
    );
}
