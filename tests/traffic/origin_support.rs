//! A raw HTTP/1.1 client for the origin tests: it shows exactly what arrived on the socket.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a read of the rest of a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// The origin closed the connection (FIN).
    Eof,
    /// The origin reset the connection.
    Reset,
    /// Nothing more arrived within the wait.
    Silent,
    /// The expected number of body bytes arrived; the connection is still open.
    Complete,
}

#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub ending: Ending,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn content_length(&self) -> Option<usize> {
        self.header("content-length").map(|v| v.parse().unwrap())
    }
}

pub struct RawConnection {
    stream: TcpStream,
    buffered: Vec<u8>,
}

impl RawConnection {
    pub async fn open(addr: SocketAddr) -> RawConnection {
        RawConnection {
            stream: TcpStream::connect(addr).await.unwrap(),
            buffered: Vec::new(),
        }
    }

    /// Sends `method path` with extra header lines, then reads the response: the head, then the
    /// body up to its Content-Length (none for HEAD and 304) or until the connection ends or
    /// nothing arrives for `wait`.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        wait: Duration,
    ) -> RawResponse {
        self.send(method, path, extra).await;
        self.read_response(method, path, wait).await
    }

    pub async fn send(&mut self, method: &str, path: &str, extra: &[(&str, &str)]) {
        let mut head = format!("{method} {path} HTTP/1.1\r\nhost: origin.test\r\n");
        for (name, value) in extra {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        self.stream.write_all(head.as_bytes()).await.unwrap();
    }

    /// Everything that arrives until the connection ends or is silent for `wait`.
    pub async fn read_raw(&mut self, wait: Duration) -> (Vec<u8>, Ending) {
        let ending = loop {
            match self.read_more(wait).await {
                Ok(true) => {}
                Ok(false) => break Ending::Eof,
                Err(Some(error)) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                    break Ending::Reset;
                }
                Err(Some(error)) => panic!("read failed: {error}"),
                Err(None) => break Ending::Silent,
            }
        };
        (std::mem::take(&mut self.buffered), ending)
    }

    async fn read_response(&mut self, method: &str, path: &str, wait: Duration) -> RawResponse {
        let head_end = loop {
            if let Some(end) = self.buffered.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            match self.read_more(wait).await {
                Ok(true) => {}
                outcome => panic!("no response head for {path}: {outcome:?}"),
            }
        };
        let head = String::from_utf8(self.buffered[..head_end].to_vec()).unwrap();
        self.buffered.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .map(|line| {
                let (name, value) = line.split_once(':').unwrap();
                (name.trim().to_ascii_lowercase(), value.trim().to_owned())
            })
            .collect();
        let mut response = RawResponse {
            status,
            headers,
            body: Vec::new(),
            ending: Ending::Complete,
        };

        let expected = if method == "HEAD" || status == 304 {
            Some(0)
        } else {
            response.content_length()
        };
        loop {
            if let Some(expected) = expected
                && self.buffered.len() >= expected
            {
                response.body = self.buffered.drain(..expected).collect();
                return response;
            }
            match self.read_more(wait).await {
                Ok(true) => {}
                Ok(false) => break response.ending = Ending::Eof,
                Err(Some(error)) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                    break response.ending = Ending::Reset;
                }
                Err(Some(error)) => panic!("read failed: {error}"),
                Err(None) => break response.ending = Ending::Silent,
            }
        }
        response.body = std::mem::take(&mut self.buffered);
        response
    }

    /// Ok(true) if bytes arrived, Ok(false) at end of stream, Err(None) if nothing came in `wait`.
    async fn read_more(&mut self, wait: Duration) -> Result<bool, Option<std::io::Error>> {
        let mut chunk = [0u8; 64 * 1024];
        match tokio::time::timeout(wait, self.stream.read(&mut chunk)).await {
            Ok(Ok(0)) => Ok(false),
            Ok(Ok(n)) => {
                self.buffered.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Ok(Err(error)) => Err(Some(error)),
            Err(_) => Err(None),
        }
    }
}

/// One request on a fresh connection.
pub async fn get(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> RawResponse {
    RawConnection::open(addr)
        .await
        .request("GET", path, extra, Duration::from_secs(5))
        .await
}
