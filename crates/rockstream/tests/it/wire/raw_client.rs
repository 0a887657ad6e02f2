//! A minimal raw PostgreSQL frontend, to drive the simple-protocol COPY that
//! psql's `\copy` uses (tokio-postgres only copies over the extended protocol).

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A client speaking protocol 3.0 message by message.
pub struct RawClient {
    stream: tokio::net::TcpStream,
}

impl RawClient {
    pub async fn connect(port: u16) -> RawClient {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        RawClient::start(stream).await
    }

    /// Connects as psql does by default: asks for TLS first (and is refused).
    pub async fn connect_asking_for_tls(port: u16) -> RawClient {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        stream
            .write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
            .await
            .unwrap();
        assert_eq!(stream.read_u8().await.unwrap(), b'N', "TLS refused");
        RawClient::start(stream).await
    }

    /// Sends the startup message and reads up to ReadyForQuery.
    async fn start(stream: tokio::net::TcpStream) -> RawClient {
        let mut client = RawClient { stream };
        let mut body = 196_608i32.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0tester\0database\0default\0\0");
        let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        startup.extend(body);
        client.stream.write_all(&startup).await.unwrap();
        client.read_until_ready().await;
        client
    }

    pub async fn send(&mut self, kind: u8, body: &[u8]) {
        let mut message = vec![kind];
        message.extend(((body.len() + 4) as i32).to_be_bytes());
        message.extend_from_slice(body);
        self.stream.write_all(&message).await.unwrap();
    }

    pub async fn read(&mut self) -> (u8, Vec<u8>) {
        let kind = self.stream.read_u8().await.unwrap();
        let length = self.stream.read_i32().await.unwrap() as usize;
        let mut body = vec![0; length - 4];
        self.stream.read_exact(&mut body).await.unwrap();
        (kind, body)
    }

    /// Sends raw bytes: a message the test built whole, however malformed.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Whether the server closes the connection (after what it sent) within 10 s.
    pub async fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        let read = self.stream.read_to_end(&mut rest);
        matches!(
            tokio::time::timeout(std::time::Duration::from_secs(10), read).await,
            Ok(Ok(_))
        )
    }

    /// An ErrorResponse's severity and SQLSTATE.
    pub async fn read_error(&mut self) -> (String, String) {
        let (kind, body) = self.read().await;
        assert_eq!(char::from(kind), 'E', "expected an ErrorResponse");
        let mut severity = String::new();
        let mut code = String::new();
        for field in body
            .split(|&byte| byte == 0)
            .filter(|field| !field.is_empty())
        {
            let value = String::from_utf8_lossy(&field[1..]).into_owned();
            match field[0] {
                b'S' => severity = value,
                b'C' => code = value,
                _ => {}
            }
        }
        (severity, code)
    }

    /// Message kinds (and CommandComplete tags) up to ReadyForQuery.
    pub async fn read_until_ready(&mut self) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let (kind, body) = self.read().await;
            match kind {
                b'C' => seen.push(String::from_utf8_lossy(&body[..body.len() - 1]).into_owned()),
                b'Z' => return seen,
                other => seen.push(char::from(other).to_string()),
            }
        }
    }
}
