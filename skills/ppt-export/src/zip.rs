//! A zip archive writer, just what a `.pptx` needs: every entry deflated
//! (`miniz_oxide`), with its CRC-32 (`crc32fast`), UTF-8 names, one fixed
//! date, and the central directory after the entries. The container is two
//! fixed record layouts, written here rather than taken from the `zip`
//! crate so the component pulls in no new dependency tree and every byte
//! that decides the output (order, dates, flags) is in view. No ZIP64:
//! a deck is far below 4 GiB, and a larger archive is refused.

/// MS-DOS date of 1980-01-01 (the format's epoch); the time is 00:00.
const DOS_DATE: u16 = (1 << 5) | 1;
const DOS_TIME: u16 = 0;
/// Version 2.0: deflate.
const VERSION: u16 = 20;
/// Bit 11: the names are UTF-8.
const FLAGS: u16 = 1 << 11;
const DEFLATE: u16 = 8;
/// miniz_oxide's level 6, zlib's default.
const LEVEL: u8 = 6;

struct Entry {
    name: String,
    crc: u32,
    compressed: u32,
    size: u32,
    offset: u32,
}

/// An archive being written, entries in the order they are added.
#[derive(Default)]
pub struct Zip {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
}

/// The archive would need ZIP64 (an entry or the whole past 4 GiB).
#[derive(Debug)]
pub struct TooLarge;

fn u32_of(n: usize) -> Result<u32, TooLarge> {
    u32::try_from(n).map_err(|_| TooLarge)
}

impl Zip {
    /// Adds `name` holding `data`, deflated.
    pub fn add(&mut self, name: &str, data: &[u8]) -> Result<(), TooLarge> {
        let compressed = miniz_oxide::deflate::compress_to_vec(data, LEVEL);
        let entry = Entry {
            name: name.to_string(),
            crc: crc32fast::hash(data),
            compressed: u32_of(compressed.len())?,
            size: u32_of(data.len())?,
            offset: u32_of(self.bytes.len())?,
        };
        let b = &mut self.bytes;
        put32(b, 0x0403_4b50);
        put16(b, VERSION);
        put16(b, FLAGS);
        put16(b, DEFLATE);
        put16(b, DOS_TIME);
        put16(b, DOS_DATE);
        put32(b, entry.crc);
        put32(b, entry.compressed);
        put32(b, entry.size);
        put16(b, u16::try_from(name.len()).map_err(|_| TooLarge)?);
        put16(b, 0);
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&compressed);
        self.entries.push(entry);
        Ok(())
    }

    /// The names of the entries, in order.
    pub fn names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name.clone()).collect()
    }

    /// The finished archive: the entries, their central directory, and its
    /// end record.
    pub fn finish(mut self) -> Result<Vec<u8>, TooLarge> {
        let start = u32_of(self.bytes.len())?;
        for e in &self.entries {
            let b = &mut self.bytes;
            put32(b, 0x0201_4b50);
            put16(b, VERSION);
            put16(b, VERSION);
            put16(b, FLAGS);
            put16(b, DEFLATE);
            put16(b, DOS_TIME);
            put16(b, DOS_DATE);
            put32(b, e.crc);
            put32(b, e.compressed);
            put32(b, e.size);
            put16(b, e.name.len() as u16);
            put16(b, 0); // extra field
            put16(b, 0); // comment
            put16(b, 0); // disk
            put16(b, 0); // internal attributes
            put32(b, 0); // external attributes
            put32(b, e.offset);
            b.extend_from_slice(e.name.as_bytes());
        }
        let size = u32_of(self.bytes.len())? - start;
        let count = u16::try_from(self.entries.len()).map_err(|_| TooLarge)?;
        let b = &mut self.bytes;
        put32(b, 0x0605_4b50);
        put16(b, 0);
        put16(b, 0);
        put16(b, count);
        put16(b, count);
        put32(b, size);
        put32(b, start);
        put16(b, 0);
        Ok(self.bytes)
    }
}

fn put16(b: &mut Vec<u8>, n: u16) {
    b.extend_from_slice(&n.to_le_bytes());
}

fn put32(b: &mut Vec<u8>, n: u32) {
    b.extend_from_slice(&n.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The archive's records where a reader looks for them: the end record
    /// points at the central directory, which points at each entry, whose
    /// data inflates back to what was added.
    #[test]
    fn entries_inflate_back_and_the_directory_finds_them() {
        let mut zip = Zip::default();
        zip.add("a.xml", b"<a/>").unwrap();
        zip.add("b/c.xml", &b"x".repeat(1000)).unwrap();
        let bytes = zip.finish().unwrap();
        let end = bytes.len() - 22;
        assert_eq!(&bytes[end..end + 4], &0x0605_4b50u32.to_le_bytes());
        let count = u16::from_le_bytes([bytes[end + 10], bytes[end + 11]]);
        assert_eq!(count, 2);
        let mut at = u32::from_le_bytes(bytes[end + 16..end + 20].try_into().unwrap()) as usize;
        let mut names = Vec::new();
        for _ in 0..count {
            assert_eq!(&bytes[at..at + 4], &0x0201_4b50u32.to_le_bytes());
            let read32 = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
            let read16 = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]) as usize;
            let (crc, compressed, name_len, offset) = (
                read32(at + 16),
                read32(at + 20),
                read16(at + 28),
                read32(at + 42),
            );
            let name = std::str::from_utf8(&bytes[at + 46..at + 46 + name_len]).unwrap();
            let local = offset as usize;
            let data_at = local + 30 + read16(local + 26);
            let data = &bytes[data_at..data_at + compressed as usize];
            let inflated = miniz_oxide::inflate::decompress_to_vec(data).unwrap();
            assert_eq!(crc32fast::hash(&inflated), crc);
            names.push((name.to_string(), inflated.len()));
            at += 46 + name_len;
        }
        assert_eq!(
            names,
            [("a.xml".to_string(), 4), ("b/c.xml".to_string(), 1000)]
        );
    }
}
