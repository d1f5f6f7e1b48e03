//! A response written to a native connection's client: its head with the first body bytes when
//! they are ready, the body in the head's framing, each socket write within the send timeout.

use std::future::poll_fn;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Body;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::net::tcp::WriteHalf;

use super::write::Framing;
use crate::cache::disk::InFile;
use crate::proxy::server::stall::StallScope;
use crate::telemetry::series;

/// Writes a response: its head with the first body bytes in one vectored write when they are
/// ready at once, then the rest of the body in `framing`. A body whose one frame is exactly the
/// bytes of `file` (a disk hit read through a mapping) goes from the file with `sendfile`
/// instead. An error leaves the connection unusable.
pub(super) async fn send<B>(
    write: &mut WriteHalf<'_>,
    head: &[u8],
    mut body: B,
    file: Option<InFile>,
    framing: Framing,
    timeout: Duration,
) -> std::io::Result<()>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut head = Some(head);
    let mut remaining = match framing {
        Framing::Length(0) => {
            // HEAD, 204, 304 or an empty body: the body is never polled.
            return write_all(
                write,
                &mut [IoSlice::new(head.unwrap_or_default())],
                timeout,
            )
            .await;
        }
        Framing::Length(length) => Some(length),
        Framing::Chunked | Framing::Close => None,
    };
    loop {
        let frame = match head {
            Some(pending) => {
                // A hit's body is ready now and goes out with its head; a miss's head goes first.
                let polled = poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await;
                match polled {
                    Poll::Ready(frame) => frame,
                    Poll::Pending => {
                        write_all(write, &mut [IoSlice::new(pending)], timeout).await?;
                        head = None;
                        body.frame().await
                    }
                }
            }
            None => body.frame().await,
        };
        let head_slice = head.take().unwrap_or_default();
        let data = match frame {
            None => return end_body(write, head_slice, remaining, framing, timeout).await,
            Some(Err(error)) => {
                write_all(write, &mut [IoSlice::new(head_slice)], timeout).await?;
                return Err(std::io::Error::other(format!(
                    "response body failed: {error}"
                )));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                // Trailers are not sent: nothing in the proxy's responses announces them.
                Err(_) => {
                    write_all(write, &mut [IoSlice::new(head_slice)], timeout).await?;
                    continue;
                }
            },
        };
        if data.is_empty() {
            write_all(write, &mut [IoSlice::new(head_slice)], timeout).await?;
            continue;
        }
        if let Some(file) = file.as_ref().filter(|file| is_whole(file, &data, framing)) {
            return send_file(write, head_slice, file, timeout).await;
        }
        let data = within_length(&mut remaining, data);
        write_data(write, head_slice, &data, framing, timeout).await?;
        if remaining == Some(0) {
            return Ok(());
        }
    }
}

/// The end of the body: what is left of the head and the last chunk go out, or an error when the
/// body ended before its announced length.
async fn end_body(
    write: &mut WriteHalf<'_>,
    head_slice: &[u8],
    remaining: Option<u64>,
    framing: Framing,
    timeout: Duration,
) -> std::io::Result<()> {
    if remaining.is_some_and(|left| left > 0) {
        write_all(write, &mut [IoSlice::new(head_slice)], timeout).await?;
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "response body ended before its announced length",
        ));
    }
    let last: &[u8] = match framing {
        Framing::Chunked => b"0\r\n\r\n",
        _ => b"",
    };
    write_all(
        write,
        &mut [IoSlice::new(head_slice), IoSlice::new(last)],
        timeout,
    )
    .await
}

/// Whether `data`, the first frame of a body framed by `framing`, is the whole body and the very
/// bytes `file` names: the same memory (the mapping of that file range), so that what `sendfile`
/// sends is what the body would have written. Anything else (a body replaced or cut on its way
/// here, chunked framing) is written as it is.
fn is_whole(file: &InFile, data: &Bytes, framing: Framing) -> bool {
    framing == Framing::Length(data.len() as u64)
        && file.len() == data.len()
        && file.bytes().as_ptr() == data.as_ptr()
}

/// Writes what is left of the head, then the body from `file` with `sendfile`: the kernel hands
/// the file's pages to the socket, with no copy through the process. Each write within
/// `timeout`; the pin in `file` keeps those bytes of the file the body's until it is dropped.
async fn send_file(
    write: &mut WriteHalf<'_>,
    head_slice: &[u8],
    file: &InFile,
    timeout: Duration,
) -> std::io::Result<()> {
    write_all(write, &mut [IoSlice::new(head_slice)], timeout).await?;
    let stream: &TcpStream = write.as_ref();
    let mut offset = file.offset();
    let mut left = file.len();
    while left > 0 {
        let sending = async {
            loop {
                stream.writable().await?;
                let sent = stream.try_io(Interest::WRITABLE, || {
                    rustix::fs::sendfile(stream, file.file(), Some(&mut offset), left)
                        .map_err(std::io::Error::from)
                });
                match sent {
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                    sent => return sent,
                }
            }
        };
        match tokio::time::timeout(timeout, sending).await {
            // The file ends inside the body: the response is cut short, never filled with
            // other bytes.
            Ok(Ok(0)) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(Ok(sent)) => {
                left -= sent;
                series().disk_sendfile_bytes.increment(sent as u64);
            }
            Ok(Err(error)) => return Err(error),
            Err(_) => {
                StallScope::Connection.count();
                return Err(std::io::ErrorKind::TimedOut.into());
            }
        }
    }
    Ok(())
}

/// The part of `data` the head announced room for, counted off `remaining` (`None`: no length).
fn within_length(remaining: &mut Option<u64>, data: Bytes) -> Bytes {
    match remaining {
        Some(left) => {
            // Never more than the head announced: the excess would be read as a response.
            let take = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
            *left -= take as u64;
            data.slice(..take)
        }
        None => data,
    }
}

/// Writes body bytes in `framing`, after what is left of the head.
async fn write_data(
    write: &mut WriteHalf<'_>,
    head_slice: &[u8],
    data: &Bytes,
    framing: Framing,
    timeout: Duration,
) -> std::io::Result<()> {
    match framing {
        Framing::Chunked => {
            let size = format!("{:x}\r\n", data.len());
            let mut slices = [
                IoSlice::new(head_slice),
                IoSlice::new(size.as_bytes()),
                IoSlice::new(data),
                IoSlice::new(b"\r\n"),
            ];
            write_all(write, &mut slices, timeout).await
        }
        Framing::Length(_) | Framing::Close => {
            write_all(
                write,
                &mut [IoSlice::new(head_slice), IoSlice::new(data)],
                timeout,
            )
            .await
        }
    }
}

/// Writes every slice, each socket write within `timeout` (`server.send_timeout`): a client that
/// takes no byte for that long is given up on.
pub(super) async fn write_all(
    write: &mut WriteHalf<'_>,
    mut slices: &mut [IoSlice<'_>],
    timeout: Duration,
) -> std::io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let written = match tokio::time::timeout(timeout, write.write_vectored(slices)).await {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(Ok(written)) => written,
            Ok(Err(error)) => return Err(error),
            Err(_) => {
                StallScope::Connection.count();
                return Err(std::io::ErrorKind::TimedOut.into());
            }
        };
        IoSlice::advance_slices(&mut slices, written);
    }
    Ok(())
}
