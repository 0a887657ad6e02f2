//! A shard's commit log on local storage (RFC 0019).
//!
//! On local storage a shard's SlateDB runs without its WAL: an epoch's
//! batch is durable once it is appended here and the segment is flushed
//! with `fdatasync`, which on a segment allocated ahead (zeros written and
//! synced before its first record) changes no file-system metadata. The
//! batch then goes to SlateDB's memtable with its log sequence number
//! (LSN) under [`keys::log_lsn_key`]; SlateDB makes it durable itself when
//! it flushes the memtable as an L0 table. Opening a shard replays every
//! record above the LSN its tables hold ([`CommitLog::open`]).
//!
//! The log is a directory of segments, `NNNNNNNNNNNNNNNNNNNN.log`, each a
//! sequence of records `[length u32][crc32 u32][lsn u64][payload]`
//! (little-endian; the CRC covers the LSN and the payload) from offset 0.
//! LSNs count up by one. The log ends at the first record that is zero,
//! torn, fails its CRC or does not carry the next LSN: records are appended
//! one at a time, each flushed before the next begins, so only the last can
//! be incomplete, and it was never acknowledged. A segment whose records
//! are all in L0 tables is renamed `NNN.spare` and reused as a later
//! segment; its old records carry old LSNs, which end a replay.
//!
//! [`keys::log_lsn_key`]: rockstream_ops::keys::log_lsn_key

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rockstream_ops::Write;
use rockstream_types::{codes, RsError, RsResult};

/// A segment's size as allocated ahead. A record that does not fit the rest
/// of a segment still goes there (the file grows); the next one starts the
/// next segment.
pub const SEGMENT_BYTES: u64 = 4 * 1024 * 1024;

/// A record's header: length, CRC, LSN.
const HEADER_BYTES: usize = 16;

/// Reclaimed segments kept for reuse; more are deleted, so the log gives
/// back the disk a burst of writes took.
const SPARES_MAX: usize = 2;

const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_ADD_COUNT: u8 = 3;

/// A shard's commit log. Appends are serialized by the caller (the shard's
/// write lock); the files sit behind a mutex taken on blocking threads.
pub struct CommitLog {
    files: Arc<Mutex<LogFiles>>,
}

/// What an open found: the log, and its records above the LSN SlateDB's
/// tables hold, to replay in order.
pub struct LogOpened {
    pub log: CommitLog,
    pub replay: Vec<Replayed>,
}

/// A record to replay: its LSN and payload.
pub type Replayed = (u64, Vec<u8>);

/// Why an append failed.
#[derive(Debug)]
pub struct AppendError {
    pub cause: RsError,
    /// The record may be on disk: its flush failed after it was written
    /// (a failed `fdatasync` leaves what reached the disk unknown).
    pub maybe_durable: bool,
}

struct LogFiles {
    dir: PathBuf,
    /// Segments that hold records or take the next ones, oldest first; the
    /// last is the one appended to.
    segments: VecDeque<Segment>,
    active: File,
    /// Where the next record goes in the active segment.
    offset: u64,
    next_lsn: u64,
    /// Reclaimed segments' files (`NNN.spare`), ready to be reused.
    spares: Vec<PathBuf>,
    /// Segments found past the log's end at open (none but after damage):
    /// made spares once the log's checks pass.
    past_end: Vec<(u64, PathBuf)>,
    /// Set when a flush failed: nothing more is appended until the shard is
    /// opened again (which rereads what is on disk).
    failed: bool,
}

struct Segment {
    number: u64,
    /// Its first record's LSN; `None` while it has none.
    first_lsn: Option<u64>,
}

impl CommitLog {
    /// Whether `dir` holds a commit log (a shard written before the log
    /// has none: [`ShardDb`](crate::ShardDb) upgrades it first).
    pub fn exists(dir: &Path) -> RsResult<bool> {
        match std::fs::metadata(dir) {
            Ok(_) => Ok(true),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(false),
            Err(error) => Err(log_error(dir, "cannot look for", error)),
        }
    }

    /// Creates an empty log in `dir` (and its parents), durably.
    pub fn create(dir: &Path) -> RsResult<()> {
        create_dirs(dir).map_err(|error| log_error(dir, "cannot create", error))?;
        new_segment(dir, 0, None).map_err(|error| log_error(dir, "cannot create", error))?;
        Ok(())
    }

    /// Opens the log in `dir` for a shard whose tables hold every record up
    /// to LSN `applied`: returns the records above it, in order. A log that
    /// begins above `applied + 1`, or ends below `applied`, has lost records
    /// (the tables hold nothing the log did not) and is refused.
    pub fn open(dir: &Path, applied: u64) -> RsResult<LogOpened> {
        let (files, replay) =
            LogFiles::open(dir, applied).map_err(|error| log_error(dir, "cannot read", error))?;
        let first = files.segments.iter().find_map(|segment| segment.first_lsn);
        let last = files.next_lsn.checked_sub(1);
        // The log always keeps its last record (the segment appended to is
        // never reclaimed): empty, it can follow only tables that hold none.
        if first.is_none() && applied > 0 {
            return Err(RsError::new(
                &codes::STORAGE_IO,
                format!(
                    "commit log '{}' is empty but its shard's tables end at record {applied}: records are missing",
                    dir.display()
                ),
            ));
        }
        if let Some(first) = first {
            if first > applied + 1 || last < Some(applied) {
                return Err(RsError::new(
                    &codes::STORAGE_IO,
                    format!(
                        "commit log '{}' holds records {first} to {} but its shard's tables end at record {applied}: records are missing",
                        dir.display(),
                        files.next_lsn - 1
                    ),
                ));
            }
        }
        let mut files = files;
        if first.is_none() {
            files.next_lsn = applied + 1;
        }
        files
            .spare_past_end()
            .map_err(|error| log_error(dir, "cannot read", error))?;
        Ok(LogOpened {
            log: CommitLog {
                files: Arc::new(Mutex::new(files)),
            },
            replay,
        })
    }

    /// The LSN the next record gets.
    pub fn next_lsn(&self) -> u64 {
        self.lock().next_lsn
    }

    /// Whether the next append starts a new segment, which is when segments
    /// whose records are all durable elsewhere are reclaimed.
    pub fn rolls_next(&self) -> bool {
        self.lock().offset >= SEGMENT_BYTES
    }

    /// Appends `payload` as record [`CommitLog::next_lsn`] and flushes it.
    /// When it starts a new segment, first reclaims the segments whose
    /// records are all at or below `durable` (what SlateDB's tables hold).
    pub async fn append(&self, record: Record, durable: Option<u64>) -> Result<u64, AppendError> {
        let files = self.files.clone();
        let appended = tokio::task::spawn_blocking(move || {
            let mut files = files
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            files.append(record, durable)
        })
        .await;
        match appended {
            Ok(appended) => appended,
            Err(error) => Err(AppendError {
                cause: RsError::new(
                    &codes::STORAGE_IO,
                    format!("commit log append did not finish: {error}"),
                ),
                maybe_durable: true,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogFiles> {
        self.files
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl LogFiles {
    fn open(dir: &Path, applied: u64) -> io::Result<(LogFiles, Vec<Replayed>)> {
        let mut numbered = Vec::new();
        let mut spares = Vec::new();
        // The highest segment number of any file: a new log's numbers start
        // after it, so no file ever comes back under a number it once had.
        let mut highest: Option<u64> = None;
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
                continue;
            };
            if let Some(number) = name
                .strip_suffix(".log")
                .and_then(|n| n.parse::<u64>().ok())
            {
                highest = highest.max(Some(number));
                numbered.push((number, path));
            } else if let Some(number) = name
                .strip_suffix(".spare")
                .and_then(|n| n.parse::<u64>().ok())
            {
                highest = highest.max(Some(number));
                spares.push(path);
            } else if name.ends_with(".tmp") {
                // A segment whose creation a crash cut short.
                std::fs::remove_file(&path)?;
            }
        }
        numbered.sort();
        let mut segments = VecDeque::new();
        let mut replay = Vec::new();
        let mut expected: Option<u64> = None;
        let mut end = None;
        let mut numbered = numbered.into_iter();
        for (number, path) in numbered.by_ref() {
            let bytes = std::fs::read(&path)?;
            let (records, ends_at) = read_records(&bytes, number, expected)?;
            let first_lsn = records.first().map(|(lsn, _)| *lsn);
            if let Some((lsn, _)) = records.last() {
                expected = Some(lsn + 1);
            }
            replay.extend(
                records
                    .into_iter()
                    .filter(|(lsn, _)| *lsn > applied)
                    .map(|(lsn, payload)| (lsn, payload.to_vec())),
            );
            segments.push_back(Segment { number, first_lsn });
            end = Some((path, bytes, ends_at));
            // The log ends in the first segment without records (one rolled
            // to but not yet written to).
            if first_lsn.is_none() {
                break;
            }
        }
        let mut past_end = Vec::new();
        // Past the end no segment holds a record written under its number:
        // one that does is the rest of a damaged log, not to be dropped.
        for (number, path) in numbered {
            let bytes = std::fs::read(&path)?;
            if let Some((lsn, _)) = read_records(&bytes, number, None)?.0.first() {
                return Err(io::Error::new(
                    ErrorKind::InvalidData,
                    format!(
                        "segment {number} holds record {lsn}, past the log's end at record {}: the log is damaged",
                        expected.map_or(0, |next| next - 1)
                    ),
                ));
            }
            past_end.push((number, path));
        }
        let (active, offset) = match end {
            Some((path, bytes, offset)) => {
                let active = OpenOptions::new().write(true).open(path)?;
                // A flush that failed before the crash or reopen may have
                // left the last record in the page cache alone (its pages
                // marked clean all the same): written again and flushed,
                // it is on disk before anything is appended after it.
                if offset > 0 {
                    active.write_all_at(&bytes[..offset], 0)?;
                    active.sync_data()?;
                }
                (active, offset)
            }
            None => {
                let number = highest.map_or(0, |highest| highest + 1);
                segments.push_back(Segment {
                    number,
                    first_lsn: None,
                });
                (new_segment(dir, number, None)?, 0)
            }
        };
        let files = LogFiles {
            dir: dir.to_path_buf(),
            segments,
            active,
            offset: offset as u64,
            next_lsn: expected.unwrap_or(1),
            spares,
            past_end,
            failed: false,
        };
        Ok((files, replay))
    }

    /// Renames the segments found past the log's end to spares.
    fn spare_past_end(&mut self) -> io::Result<()> {
        for (number, path) in std::mem::take(&mut self.past_end) {
            let spare = self.dir.join(format!("{number:020}.spare"));
            std::fs::rename(&path, &spare)?;
            sync_dir(&self.dir)?;
            self.spares.push(spare);
        }
        Ok(())
    }

    fn append(&mut self, record: Record, durable: Option<u64>) -> Result<u64, AppendError> {
        if self.failed {
            return Err(AppendError {
                cause: RsError::new(
                    &codes::STORAGE_IO,
                    format!(
                        "commit log '{}' failed a flush and takes no more records until its shard is reopened",
                        self.dir.display()
                    ),
                ),
                maybe_durable: false,
            });
        }
        if self.offset >= SEGMENT_BYTES {
            self.roll(durable).map_err(|error| AppendError {
                cause: log_error(&self.dir, "cannot start a segment of", error),
                maybe_durable: false,
            })?;
        }
        let lsn = self.next_lsn;
        let number = self.segments.back().map_or(0, |segment| segment.number);
        let record = record.seal(number, lsn).map_err(|error| AppendError {
            cause: log_error(&self.dir, "cannot write", error),
            maybe_durable: false,
        })?;
        // A failed write leaves the record incomplete (its CRC fails): the
        // next append writes over it.
        self.active
            .write_all_at(&record, self.offset)
            .map_err(|error| AppendError {
                cause: log_error(&self.dir, "cannot write", error),
                maybe_durable: false,
            })?;
        if let Err(error) = self.active.sync_data() {
            self.failed = true;
            return Err(AppendError {
                cause: log_error(&self.dir, "cannot flush", error),
                maybe_durable: true,
            });
        }
        self.offset += record.len() as u64;
        self.next_lsn += 1;
        if let Some(active) = self.segments.back_mut() {
            active.first_lsn.get_or_insert(lsn);
        }
        Ok(lsn)
    }

    /// Starts the next segment, reusing a spare if there is one, after
    /// reclaiming the segments whose records are all at or below `durable`.
    fn roll(&mut self, durable: Option<u64>) -> io::Result<()> {
        if let Some(durable) = durable {
            self.reclaim(durable)?;
        }
        let number = self.segments.back().map_or(0, |segment| segment.number + 1);
        let spare = self.spares.pop();
        let segment = new_segment(&self.dir, number, spare.clone());
        if segment.is_err() {
            // The spare, under whichever name the failure left it (its old
            // records cannot pass as the new number's).
            let left = spare
                .into_iter()
                .chain([segment_path(&self.dir, number)])
                .find(|path| path.exists());
            self.spares.extend(left);
        }
        self.active = segment?;
        self.offset = 0;
        self.segments.push_back(Segment {
            number,
            first_lsn: None,
        });
        Ok(())
    }

    /// Renames to spares the segments, oldest first, whose records all have
    /// LSNs at or below `durable`; never the active one.
    fn reclaim(&mut self, durable: u64) -> io::Result<()> {
        while self.segments.len() > 1 {
            // A segment's records end where the next one's begin.
            let ends_before = self
                .segments
                .get(1)
                .and_then(|next| next.first_lsn)
                .unwrap_or(self.next_lsn);
            if ends_before > durable + 1 {
                break;
            }
            let Some(number) = self.segments.front().map(|segment| segment.number) else {
                break;
            };
            let from = segment_path(&self.dir, number);
            // Forgotten only once its file is gone from the log, so a failed
            // rename leaves the log whole.
            if self.spares.len() < SPARES_MAX {
                let to = self.dir.join(format!("{number:020}.spare"));
                std::fs::rename(&from, &to)?;
                self.spares.push(to);
            } else {
                std::fs::remove_file(&from)?;
            }
            self.segments.pop_front();
            // One change to the directory at a time: the segments go
            // oldest first, so a crash never leaves a hole in the log.
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

/// A record read from a segment: its LSN and payload.
type Found<'a> = (u64, &'a [u8]);

/// The valid records of a segment from its start, each with the LSN that
/// follows the one before (the first one any LSN if `expected` is `None`),
/// and where they end: at the first record that is zero, torn or fails its
/// CRC. One that passes its CRC out of sequence is an error.
fn read_records(
    bytes: &[u8],
    segment: u64,
    mut expected: Option<u64>,
) -> io::Result<(Vec<Found<'_>>, usize)> {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + HEADER_BYTES) {
        let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let lsn = u64::from_le_bytes([
            header[8], header[9], header[10], header[11], header[12], header[13], header[14],
            header[15],
        ]);
        if length == 0 {
            break;
        }
        let Some(payload) = bytes.get(at + HEADER_BYTES..at + HEADER_BYTES + length) else {
            break;
        };
        if record_crc(segment, lsn, payload) != crc {
            break;
        }
        // Whole and written in this segment, yet out of sequence: no crash
        // leaves that (a torn write fails its CRC; a reused segment's old
        // records were written under another number). The log is damaged,
        // and what follows must not be dropped as a torn tail.
        if let Some(expected) = expected.filter(|expected| *expected != lsn) {
            return Err(io::Error::new(
                ErrorKind::InvalidData,
                format!(
                    "segment {segment} holds record {lsn} where record {expected} belongs: the log is damaged"
                ),
            ));
        }
        records.push((lsn, payload));
        expected = Some(lsn + 1);
        at += HEADER_BYTES + length;
    }
    Ok((records, at))
}

/// A record's CRC, over the number of the segment it was written in (so a
/// reused segment's old records never pass), its LSN and its payload.
fn record_crc(segment: u64, lsn: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&segment.to_le_bytes());
    hasher.update(&lsn.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// A record being built: room for its header, then its payload.
pub struct Record(Vec<u8>);

impl Default for Record {
    fn default() -> Record {
        Record(vec![0; HEADER_BYTES])
    }
}

impl Record {
    /// Adds one write of the batch.
    pub fn push(&mut self, key: &[u8], write: &Write) {
        encode_write(key, write, &mut self.0);
    }

    /// Whether it holds no write.
    pub fn is_empty(&self) -> bool {
        self.0.len() == HEADER_BYTES
    }

    /// The record's bytes, its header filled in for LSN `lsn` in segment
    /// `segment`.
    fn seal(mut self, segment: u64, lsn: u64) -> io::Result<Vec<u8>> {
        let length = u32::try_from(self.0.len() - HEADER_BYTES).map_err(|_| {
            io::Error::new(
                ErrorKind::InvalidInput,
                "a commit of 4 GiB or more does not fit one record",
            )
        })?;
        let crc = record_crc(segment, lsn, &self.0[HEADER_BYTES..]);
        self.0[0..4].copy_from_slice(&length.to_le_bytes());
        self.0[4..8].copy_from_slice(&crc.to_le_bytes());
        self.0[8..HEADER_BYTES].copy_from_slice(&lsn.to_le_bytes());
        Ok(self.0)
    }
}

/// Appends one write of a batch to `out`, as commit-log records and the
/// coordinator's epoch records (`rockstream_runtime`'s `epoch::log`) hold
/// them: `kind(1) key_len(4) key [value_len(4) value | weight(8)]`,
/// big-endian, kind 1 a put, 2 a delete, 3 a count addition.
pub fn encode_write(key: &[u8], write: &Write, out: &mut Vec<u8>) {
    let kind = match write {
        Write::Put(_) => TAG_PUT,
        Write::Delete => TAG_DELETE,
        Write::AddCount(_) => TAG_ADD_COUNT,
    };
    out.push(kind);
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    match write {
        Write::Put(value) => {
            out.extend_from_slice(&(value.len() as u32).to_be_bytes());
            out.extend_from_slice(value);
        }
        Write::Delete => {}
        Write::AddCount(weight) => out.extend_from_slice(&weight.to_be_bytes()),
    }
}

/// The writes [`encode_write`] put in `bytes`, in order; `None` if they do
/// not parse (a record that passed its CRC always does).
pub fn decode_writes(mut bytes: &[u8]) -> Option<Vec<(Vec<u8>, Write)>> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = rest;
        Some(head)
    }
    fn length(bytes: &mut &[u8]) -> Option<usize> {
        Some(u32::from_be_bytes(take(bytes, 4)?.try_into().ok()?) as usize)
    }
    let mut writes = Vec::new();
    while !bytes.is_empty() {
        let kind = take(&mut bytes, 1)?[0];
        let key_len = length(&mut bytes)?;
        let key = take(&mut bytes, key_len)?.to_vec();
        let write = match kind {
            TAG_PUT => {
                let value_len = length(&mut bytes)?;
                Write::Put(take(&mut bytes, value_len)?.to_vec())
            }
            TAG_DELETE => Write::Delete,
            TAG_ADD_COUNT => {
                Write::AddCount(i64::from_be_bytes(take(&mut bytes, 8)?.try_into().ok()?))
            }
            _ => return None,
        };
        writes.push((key, write));
    }
    Some(writes)
}

fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.log"))
}

/// Makes segment `number` ready for records, durably: a spare renamed, or a
/// new file of [`SEGMENT_BYTES`] zeros, written and flushed before it gets
/// its name. Returns it open for writing.
fn new_segment(dir: &Path, number: u64, spare: Option<PathBuf>) -> io::Result<File> {
    let path = segment_path(dir, number);
    match spare {
        Some(spare) => std::fs::rename(spare, &path)?,
        None => {
            let staging = dir.join(format!("{number:020}.tmp"));
            let zeroed = write_zeros(&staging).and_then(|()| std::fs::rename(&staging, &path));
            if let Err(error) = zeroed {
                let _ = std::fs::remove_file(&staging);
                return Err(error);
            }
        }
    }
    sync_dir(dir)?;
    OpenOptions::new().write(true).open(&path)
}

/// A new file of [`SEGMENT_BYTES`] zeros at `path`, flushed.
fn write_zeros(path: &Path) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let zeros = vec![0u8; 1024 * 1024];
    let mut written = 0;
    while written < SEGMENT_BYTES {
        file.write_all_at(&zeros, written)?;
        written += zeros.len() as u64;
    }
    file.sync_all()
}

/// Creates `dir` and any missing parents, each made durable in its parent.
pub(crate) fn create_dirs(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn log_error(dir: &Path, what: &str, error: io::Error) -> RsError {
    if matches!(
        error.kind(),
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded
    ) {
        return RsError::new(
            &codes::STORAGE_FULL,
            format!(
                "could not write commit log '{}': the disk is full",
                dir.display()
            ),
        );
    }
    RsError::new(
        &codes::STORAGE_IO,
        format!("{what} commit log '{}': {error}", dir.display()),
    )
}

#[cfg(test)]
mod tests {
    //! Goal: what was appended is read back in order after a reopen, and
    //! nothing else: a torn or corrupted tail ends the log at the record
    //! before it, reclaimed segments' old records are never replayed, and
    //! a log that lost records is refused rather than opened with a gap.
    use super::*;

    fn record(n: u64) -> Record {
        let mut record = Record::default();
        record.push(&n.to_be_bytes(), &Write::Put(vec![n as u8; 7]));
        record.push(b"gone", &Write::Delete);
        record.push(b"count", &Write::AddCount(-(n as i64)));
        record
    }

    fn payload(n: u64) -> Vec<u8> {
        record(n).0.split_off(HEADER_BYTES)
    }

    fn lsns(opened: &LogOpened) -> Vec<u64> {
        opened.replay.iter().map(|(lsn, _)| *lsn).collect()
    }

    async fn append_all(log: &CommitLog, range: std::ops::RangeInclusive<u64>) {
        for n in range {
            let lsn = log.append(record(n), None).await.expect("append");
            assert_eq!(lsn, n);
        }
    }

    #[tokio::test]
    async fn records_come_back_in_order_above_what_the_tables_hold() {
        let dir = tempfile::tempdir().expect("dir");
        let dir = dir.path().join("log");
        CommitLog::create(&dir).expect("create");
        let opened = CommitLog::open(&dir, 0).expect("open");
        assert!(opened.replay.is_empty());
        append_all(&opened.log, 1..=5).await;
        drop(opened);
        let opened = CommitLog::open(&dir, 2).expect("reopen");
        assert_eq!(lsns(&opened), vec![3, 4, 5]);
        for (lsn, bytes) in &opened.replay {
            let writes = decode_writes(bytes).expect("parses");
            let again = payload(*lsn);
            assert_eq!(decode_writes(&again), Some(writes));
        }
        assert_eq!(opened.log.next_lsn(), 6);
        append_all(&opened.log, 6..=6).await;
    }

    #[tokio::test]
    async fn a_torn_or_corrupt_tail_ends_the_log_at_the_record_before() {
        let dir = tempfile::tempdir().expect("dir");
        CommitLog::create(dir.path()).expect("create");
        let opened = CommitLog::open(dir.path(), 0).expect("open");
        append_all(&opened.log, 1..=3).await;
        drop(opened);
        let segment = segment_path(dir.path(), 0);
        let bytes = std::fs::read(&segment).expect("read");
        let length = |n: u64| record(n).0.len();
        let third = length(1) + length(2);
        for damage in 0..3 {
            let mut damaged = bytes.clone();
            match damage {
                // The last record's payload cut short by zeros.
                0 => damaged[third + length(3) - 3..third + length(3)].fill(0),
                // A flipped bit in its payload.
                1 => damaged[third + HEADER_BYTES + 2] ^= 1,
                // Its LSN not the next one (its CRC made to match).
                _ => {
                    let sealed = record(9).seal(0, 9).expect("seals");
                    damaged[third..third + sealed.len()].copy_from_slice(&sealed);
                }
            }
            std::fs::write(&segment, &damaged).expect("write");
            if damage == 2 {
                // Whole but out of sequence: damage, not a torn tail.
                let error = CommitLog::open(dir.path(), 0).err().expect("refused");
                assert!(error.to_string().contains("the log is damaged"), "{error}");
                std::fs::write(&segment, &bytes).expect("write");
                continue;
            }
            let opened = CommitLog::open(dir.path(), 0).expect("open");
            assert_eq!(lsns(&opened), vec![1, 2], "damage {damage}");
            // The next append writes over the damaged record.
            append_all(&opened.log, 3..=3).await;
            drop(opened);
            let opened = CommitLog::open(dir.path(), 0).expect("open");
            assert_eq!(lsns(&opened), vec![1, 2, 3], "damage {damage}");
        }
    }

    #[tokio::test]
    async fn reclaimed_segments_are_reused_and_never_replayed() {
        let dir = tempfile::tempdir().expect("dir");
        CommitLog::create(dir.path()).expect("create");
        let opened = CommitLog::open(dir.path(), 0).expect("open");
        let log = opened.log;
        // Records of a quarter segment: a segment holds four.
        let big = |n: u64| {
            let mut record = Record::default();
            let value = vec![n as u8; SEGMENT_BYTES as usize / 4];
            record.push(&n.to_be_bytes(), &Write::Put(value));
            record
        };
        let mut durable = 0;
        for n in 1..=20 {
            if log.rolls_next() {
                // The tables hold all but the last two records.
                durable = n - 3;
            }
            let reclaim = log.rolls_next().then_some(durable);
            assert_eq!(log.append(big(n), reclaim).await.expect("append"), n);
        }
        let files: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let logs = files.iter().filter(|name| name.ends_with(".log")).count();
        assert!(logs <= 3, "segments kept: {files:?}");
        drop(log);
        let opened = CommitLog::open(dir.path(), durable).expect("open");
        assert_eq!(lsns(&opened), ((durable + 1)..=20).collect::<Vec<_>>());
        for (lsn, bytes) in &opened.replay {
            assert_eq!(bytes, &big(*lsn).0.split_off(HEADER_BYTES));
        }
        // Files were reused rather than created: no more than were ever
        // live at once, plus the one rolled to.
        assert!(files.len() <= 5, "files: {files:?}");
    }

    #[tokio::test]
    async fn a_log_that_lost_records_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        CommitLog::create(dir.path()).expect("create");
        // Tables holding records of a log now empty.
        let error = CommitLog::open(dir.path(), 3).err().expect("refused");
        assert!(error.to_string().contains("records are missing"), "{error}");
        // A log holding records 11 and 12 (the ones before reclaimed).
        let mut segment = std::fs::read(segment_path(dir.path(), 0)).expect("read");
        let mut at = 0;
        for n in 11..=12 {
            let sealed = record(n).seal(0, n).expect("seals");
            segment[at..at + sealed.len()].copy_from_slice(&sealed);
            at += sealed.len();
        }
        std::fs::write(segment_path(dir.path(), 0), &segment).expect("write");
        // The tables end at 9: record 10 is missing.
        let error = CommitLog::open(dir.path(), 9).err().expect("refused");
        assert!(error.to_string().contains("records are missing"), "{error}");
        // The tables hold more than the log ever had.
        let error = CommitLog::open(dir.path(), 13).err().expect("refused");
        assert!(error.to_string().contains("records are missing"), "{error}");
        assert_eq!(
            lsns(&CommitLog::open(dir.path(), 11).expect("open")),
            vec![12]
        );
        // A segment past the end holding records of its own: a damaged log.
        let past = segment_path(dir.path(), 7);
        std::fs::write(&past, record(20).seal(7, 20).expect("seals")).expect("write");
        let error = CommitLog::open(dir.path(), 11).err().expect("refused");
        assert!(error.to_string().contains("the log is damaged"), "{error}");
        std::fs::remove_file(&past).expect("remove");
        assert_eq!(
            lsns(&CommitLog::open(dir.path(), 10).expect("open")),
            vec![11, 12]
        );
    }
}
