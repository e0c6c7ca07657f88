//! Reading a stream ahead on its own thread.
//!
//! A cache audit's time is spent decompressing (xz, zstd, bzip2) and, after
//! that, hashing the NAR and writing its objects out: two halves of about
//! the same cost, one after the other on one core. [`read_ahead`] moves the
//! first half (the transfer and the decompression) to a thread of its own,
//! handing blocks over a bounded channel, so the two overlap: memory grows by
//! at most [`DEPTH`] + 2 blocks of [`BLOCK`] bytes whatever the stream.

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver};

/// Bytes per block handed over.
pub const BLOCK: usize = 256 * 1024;
/// Blocks waiting in the channel at most.
pub const DEPTH: usize = 4;

/// A reader whose bytes are read from the inner one by a thread ahead of
/// the caller. An error of the inner reader is returned once it is reached
/// (and on every read after it); dropping the reader stops the thread at its
/// next block.
pub struct ReadAhead {
    rx: Receiver<io::Result<Vec<u8>>>,
    block: Vec<u8>,
    pos: usize,
    failed: Option<(io::ErrorKind, String)>,
}

/// Starts reading `inner` on a new thread; when no thread can be had, the
/// stream is read in the caller's thread as before.
pub fn read_ahead(inner: Box<dyn Read + Send>) -> Box<dyn Read + Send> {
    let (tx, rx) = sync_channel::<io::Result<Vec<u8>>>(DEPTH);
    let inner = std::sync::Arc::new(std::sync::Mutex::new(Some(inner)));
    let for_thread = inner.clone();
    let spawned = std::thread::Builder::new().name("read-ahead".into()).spawn(move || {
        let Some(mut inner) = for_thread.lock().ok().and_then(|mut i| i.take()) else { return };
        loop {
            let mut block = vec![0u8; BLOCK];
            let mut len = 0;
            let end = loop {
                match inner.read(&mut block[len..]) {
                    Ok(0) => break true,
                    Ok(n) => {
                        len += n;
                        if len == BLOCK {
                            break false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        if len > 0 {
                            block.truncate(len);
                            let _ = tx.send(Ok(block));
                        }
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            };
            block.truncate(len);
            if (len > 0 && tx.send(Ok(block)).is_err()) || end {
                return;
            }
        }
    });
    match spawned {
        Ok(_) => Box::new(ReadAhead { rx, block: Vec::new(), pos: 0, failed: None }),
        Err(_) => match inner.lock().ok().and_then(|mut i| i.take()) {
            Some(inner) => inner,
            None => Box::new(io::empty()),
        },
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.pos == self.block.len() {
            if let Some((kind, text)) = &self.failed {
                return Err(io::Error::new(*kind, text.clone()));
            }
            match self.rx.recv() {
                Ok(Ok(block)) => {
                    self.block = block;
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.failed = Some((e.kind(), e.to_string()));
                    return Err(e);
                }
                // The thread is done: the stream ended.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.block.len() - self.pos);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Yields `data` in odd-sized pieces, then an error when asked.
    struct Pieces {
        data: Vec<u8>,
        at: usize,
        fail: bool,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.at == self.data.len() {
                return if self.fail { Err(io::Error::other("cut")) } else { Ok(0) };
            }
            let n = buf.len().min(7919).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn bytes_and_errors_arrive_in_order() {
        let data: Vec<u8> = (0..3 * BLOCK + 12345).map(|i| (i * 31 % 251) as u8).collect();
        for (fail, size) in [(false, data.len()), (true, data.len()), (false, 0), (true, 10)] {
            let pieces = Pieces { data: data[..size].to_vec(), at: 0, fail };
            let mut got = Vec::new();
            let result = read_ahead(Box::new(pieces)).read_to_end(&mut got);
            assert_eq!(got, data[..size], "fail={fail} size={size}");
            assert_eq!(result.is_err(), fail, "fail={fail} size={size}");
        }
        // Dropped early: the thread stops, nothing hangs.
        let pieces = Pieces { data: data.clone(), at: 0, fail: false };
        let mut r = read_ahead(Box::new(pieces));
        let mut one = [0u8; 10];
        r.read_exact(&mut one).unwrap();
        assert_eq!(one, data[..10]);
    }
}
