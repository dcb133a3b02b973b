//! Gantry's patch: a codec framing with small buffers.
//!
//! `tokio_util::codec::Framed` gives every connection an 8 KiB read buffer and an 8 KiB write
//! buffer up front and never lets them start smaller (`from_parts` reserves up to 8 KiB too).
//! An MQTT device mostly sits idle between a few small packets, so at 19,000 connections those
//! buffers are most of the broker's memory. This framing starts both buffers at
//! `INITIAL_CAPACITY` and lets them grow only as far as a packet needs. It keeps the parts of
//! `Framed`'s API this crate uses: `Stream`, `Sink` and `codec_mut`.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use futures::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{Decoder, Encoder};
use tokio_util::io::poll_read_buf;

/// Bytes each buffer starts with: a CONNECT, SUBSCRIBE or small PUBLISH fits.
const INITIAL_CAPACITY: usize = 512;
/// Queued output past which `poll_ready` flushes first, as `Framed` does at 8 KiB.
const BACKPRESSURE_BOUNDARY: usize = 8 * 1024;

pub struct Framed<T, U> {
    io: T,
    codec: U,
    read_buf: BytesMut,
    write_buf: BytesMut,
    eof: bool,
}

impl<T, U> Framed<T, U> {
    pub fn new(io: T, codec: U) -> Self {
        Framed {
            io,
            codec,
            read_buf: BytesMut::with_capacity(INITIAL_CAPACITY),
            write_buf: BytesMut::with_capacity(INITIAL_CAPACITY),
            eof: false,
        }
    }

    pub fn codec_mut(&mut self) -> &mut U {
        &mut self.codec
    }
}

impl<T, U> Stream for Framed<T, U>
where
    T: AsyncRead + Unpin,
    U: Decoder + Unpin,
{
    type Item = Result<U::Item, U::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.eof {
                // Like `Framed`: whatever is left is decoded once more, then the stream ends.
                return Poll::Ready(match this.codec.decode_eof(&mut this.read_buf) {
                    Ok(Some(frame)) => Some(Ok(frame)),
                    Ok(None) => None,
                    Err(e) => Some(Err(e)),
                });
            }
            match this.codec.decode(&mut this.read_buf) {
                Ok(Some(frame)) => return Poll::Ready(Some(Ok(frame))),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
            // Reclaims the consumed front of the buffer when no decoded frame still holds it,
            // else allocates another of the original capacity.
            this.read_buf.reserve(1);
            match poll_read_buf(Pin::new(&mut this.io), cx, &mut this.read_buf) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(Ok(0)) => this.eof = true,
                Poll::Ready(Ok(_)) => {}
            }
        }
    }
}

impl<T, U, I> Sink<I> for Framed<T, U>
where
    T: AsyncWrite + Unpin,
    U: Encoder<I> + Unpin,
{
    type Error = U::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.write_buf.len() >= BACKPRESSURE_BOUNDARY {
            self.poll_flush(cx)
        } else {
            Poll::Ready(Ok(()))
        }
    }

    fn start_send(self: Pin<&mut Self>, item: I) -> Result<(), Self::Error> {
        let this = self.get_mut();
        this.codec.encode(item, &mut this.write_buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let this = self.get_mut();
        while this.write_buf.has_remaining() {
            match Pin::new(&mut this.io).poll_write(cx, &this.write_buf) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Ready(Ok(0)) => {
                    let e = std::io::Error::new(std::io::ErrorKind::WriteZero, "failed to write frame to transport");
                    return Poll::Ready(Err(e.into()));
                }
                Poll::Ready(Ok(n)) => this.write_buf.advance(n),
            }
        }
        Pin::new(&mut this.io).poll_flush(cx).map_err(Into::into)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        futures::ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx).map_err(Into::into)
    }
}
