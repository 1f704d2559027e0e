//! Records an export writes once, in order, and reads back in order: the exported
//! keys and the proved leaves of a whole export, which grow with the keys exported
//! (docs/PERFORMANCE.md, "A whole export's proofs in flat memory"). The first
//! [`IN_MEMORY`] bytes stay in memory; past that everything goes to an anonymous
//! temporary file (in `$TMPDIR`, unlinked at once, so nothing is left behind however
//! the process ends), and memory stays flat.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;

/// Bytes held in memory before a spool moves to a file.
pub(crate) const IN_MEMORY: usize = 256 * 1024;

/// Length-prefixed records, appended and read back in order.
#[derive(Default)]
pub struct Spool {
    /// Records not yet in the file (all of them while there is none).
    mem: Vec<u8>,
    file: Option<File>,
    file_len: u64,
    records: u64,
}

impl Spool {
    pub fn new() -> Spool {
        Spool::default()
    }

    /// Appends one record.
    pub fn push(&mut self, record: &[u8]) -> io::Result<()> {
        let len = u32::try_from(record.len())
            .map_err(|_| io::Error::other("a spooled record is over 4 GiB"))?;
        self.mem.extend_from_slice(&len.to_le_bytes());
        self.mem.extend_from_slice(record);
        self.records += 1;
        if self.mem.len() >= IN_MEMORY {
            let file = match &self.file {
                Some(file) => file,
                None => self.file.insert(tempfile::tempfile()?),
            };
            file.write_all_at(&self.mem, self.file_len)?;
            self.file_len += self.mem.len() as u64;
            self.mem.clear();
        }
        Ok(())
    }

    /// Records pushed so far.
    pub fn len(&self) -> u64 {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Whether the records went to a file.
    #[cfg(test)]
    fn spilled(&self) -> bool {
        self.file.is_some()
    }

    /// Every record from the first, as often as asked (reads are positional: a
    /// reader does not move the spool).
    pub fn reader(&self) -> SpoolReader<'_> {
        let file = self.file.as_ref().map(|file| At {
            file,
            pos: 0,
            end: self.file_len,
        });
        SpoolReader {
            inner: BufReader::with_capacity(64 * 1024, Parts(file, &self.mem)),
            record: Vec::new(),
        }
    }
}

/// A file's bytes from `pos` to `end`, read with `pread`.
pub struct At<'a> {
    pub file: &'a File,
    pub pos: u64,
    pub end: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min((self.end - self.pos) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// The file's part, then the memory's.
struct Parts<'a>(Option<At<'a>>, &'a [u8]);

impl Read for Parts<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(file) = &mut self.0 {
            match file.read(buf)? {
                0 => self.0 = None,
                n => return Ok(n),
            }
        }
        self.1.read(buf)
    }
}

pub struct SpoolReader<'a> {
    inner: BufReader<Parts<'a>>,
    record: Vec<u8>,
}

impl SpoolReader<'_> {
    /// The next record; `None` after the last.
    pub fn next_record(&mut self) -> io::Result<Option<&[u8]>> {
        if self.inner.fill_buf()?.is_empty() {
            return Ok(None);
        }
        let mut len = [0u8; 4];
        self.inner.read_exact(&mut len)?;
        self.record.resize(u32::from_le_bytes(len) as usize, 0);
        self.inner.read_exact(&mut self.record)?;
        Ok(Some(&self.record))
    }
}

/// Little-endian integers and length-prefixed text, for records.
pub struct Fields<'a>(pub &'a [u8]);

impl<'a> Fields<'a> {
    pub fn u64(&mut self) -> io::Result<u64> {
        let (head, rest) = self
            .0
            .split_first_chunk::<8>()
            .ok_or_else(|| io::Error::other("a spooled record is short"))?;
        self.0 = rest;
        Ok(u64::from_le_bytes(*head))
    }

    pub fn i64(&mut self) -> io::Result<i64> {
        self.u64().map(|n| n as i64)
    }

    /// Text of `len` bytes, or the rest when `None`.
    pub fn text(&mut self, len: Option<usize>) -> io::Result<&'a str> {
        let len = len.unwrap_or(self.0.len());
        if len > self.0.len() {
            return Err(io::Error::other("a spooled record is short"));
        }
        let (text, rest) = self.0.split_at(len);
        self.0 = rest;
        std::str::from_utf8(text).map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(spool: &Spool) -> Vec<Vec<u8>> {
        let mut reader = spool.reader();
        let mut out = Vec::new();
        while let Some(record) = reader.next_record().unwrap() {
            out.push(record.to_vec());
        }
        out
    }

    #[test]
    fn records_come_back_in_order_from_memory_and_from_the_file() {
        let mut small = Spool::new();
        small.push(b"one").unwrap();
        small.push(b"").unwrap();
        small.push(b"three").unwrap();
        assert!(!small.spilled());
        assert_eq!(
            read_all(&small),
            [b"one".to_vec(), vec![], b"three".to_vec()]
        );

        // Past the memory's share: a file, then memory again for the tail.
        let mut big = Spool::new();
        let records: Vec<Vec<u8>> = (0..40_000u32)
            .map(|n| format!("record {n} {}", "x".repeat((n % 17) as usize)).into_bytes())
            .collect();
        for r in &records {
            big.push(r).unwrap();
        }
        assert!(big.spilled());
        assert_eq!(big.len(), 40_000);
        assert_eq!(read_all(&big), records);
        // Read twice: a reader does not consume the spool.
        assert_eq!(read_all(&big), records);
    }

    #[test]
    fn fields_read_what_was_written_and_refuse_a_short_record() {
        let mut record = 7u64.to_le_bytes().to_vec();
        record.extend_from_slice(&(-3i64).to_le_bytes());
        record.extend_from_slice("key/é".as_bytes());
        let mut f = Fields(&record);
        assert_eq!(f.u64().unwrap(), 7);
        assert_eq!(f.i64().unwrap(), -3);
        assert_eq!(f.text(None).unwrap(), "key/é");
        assert!(Fields(&[1, 2, 3]).u64().is_err());
        assert!(Fields(b"ab").text(Some(3)).is_err());
    }
}
