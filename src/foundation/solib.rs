//! Shared libraries read by seeking, not whole (PyTorch's libtorch_cuda.so is 900 MB, and
//! the fingerprint reads its fat binary's headers in well under a millisecond; `elf.rs`
//! parses an image held in memory, as a cubin is). Just enough of ELF64 (little-endian, as on
//! x86-64 and aarch64 Linux) to answer these questions without running a tool: which symbols a shared library defines and which it
//! needs (its dynamic symbol table), and which GPU architectures its device code was built
//! for (the headers of its `.nv_fatbin` section). Files are read by seeking to what is
//! needed, with every offset and size checked against the file: a library from elsewhere
//! cannot make this read past its end or allocate more than it holds.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Why a file cannot be read as a shared library.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// It cannot be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The system's words.
        #[source]
        source: std::io::Error,
    },
    /// It is not a 64-bit little-endian ELF file, or its tables point outside it.
    #[error("{path} is not a readable ELF64 shared library: {reason}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// One section header.
#[derive(Clone, Debug)]
struct Section {
    name: String,
    offset: u64,
    size: u64,
    link: u32,
}

struct Elf {
    file: File,
    len: u64,
    path: String,
    sections: Vec<Section>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Elf {
    fn open(path: &Path) -> Result<Elf, ElfError> {
        let shown = path.display().to_string();
        let io = |source| ElfError::Io {
            path: shown.clone(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut elf = Elf {
            file,
            len,
            path: shown,
            sections: Vec::new(),
        };
        let head = elf.read(0, 64)?;
        if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
            return Err(elf.bad("not a 64-bit little-endian ELF file"));
        }
        let shoff = u64_at(&head, 0x28);
        let shentsize = u64::from(u16_at(&head, 0x3a));
        let shnum = u64::from(u16_at(&head, 0x3c));
        let shstrndx = u16_at(&head, 0x3e) as usize;
        if shentsize < 64 || shnum == 0 {
            return Err(elf.bad("no section headers"));
        }
        let table = elf.read(shoff, shentsize * shnum)?;
        let mut raw = Vec::new();
        for i in 0..shnum as usize {
            let h = &table[i * shentsize as usize..];
            raw.push((
                u32_at(h, 0),
                Section {
                    name: String::new(),
                    offset: u64_at(h, 0x18),
                    size: u64_at(h, 0x20),
                    link: u32_at(h, 0x28),
                },
            ));
        }
        let names = match raw.get(shstrndx) {
            Some((_, s)) if s.size <= 1 << 20 => elf.read(s.offset, s.size)?,
            _ => return Err(elf.bad("no section name table")),
        };
        elf.sections = raw
            .into_iter()
            .map(|(n, mut s)| {
                s.name = c_str(&names, n as usize);
                s
            })
            .collect();
        Ok(elf)
    }

    fn bad(&self, reason: &str) -> ElfError {
        ElfError::Malformed {
            path: self.path.clone(),
            reason: reason.to_string(),
        }
    }

    /// `size` bytes at `offset`, refused where they would pass the end of the file.
    fn read(&mut self, offset: u64, size: u64) -> Result<Vec<u8>, ElfError> {
        if offset.checked_add(size).is_none_or(|end| end > self.len) {
            return Err(self.bad("a table points past the end of the file"));
        }
        let mut buf = vec![0; size as usize];
        let path = self.path.clone();
        self.file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| self.file.read_exact(&mut buf))
            .map_err(|source| ElfError::Io { path, source })?;
        Ok(buf)
    }

    fn section(&self, name: &str) -> Option<Section> {
        self.sections.iter().find(|s| s.name == name).cloned()
    }
}

fn c_str(b: &[u8], at: usize) -> String {
    let tail = b.get(at..).unwrap_or_default();
    let end = tail.iter().position(|&c| c == 0).unwrap_or(tail.len());
    String::from_utf8_lossy(&tail[..end]).into_owned()
}

/// A library's dynamic symbols: what it exports and what it expects from others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DynamicSymbols {
    /// Defined (exported) functions and objects, mangled.
    pub defined: Vec<String>,
    /// Undefined symbols it needs, mangled.
    pub undefined: Vec<String>,
    /// The libraries it names as needed (`DT_NEEDED`).
    pub needed: Vec<String>,
}

/// Reads the dynamic symbol table (`.dynsym` with its `.dynstr`) and `DT_NEEDED` entries.
pub fn dynamic_symbols(path: &Path) -> Result<DynamicSymbols, ElfError> {
    let mut elf = Elf::open(path)?;
    let Some(dynsym) = elf.section(".dynsym") else {
        return Ok(DynamicSymbols::default());
    };
    let strtab = elf
        .sections
        .get(dynsym.link as usize)
        .cloned()
        .ok_or_else(|| elf.bad(".dynsym has no string table"))?;
    let strings = elf.read(strtab.offset, strtab.size)?;
    let table = elf.read(dynsym.offset, dynsym.size)?;
    let mut out = DynamicSymbols::default();
    for sym in table.chunks_exact(24).skip(1) {
        let name = c_str(&strings, u32_at(sym, 0) as usize);
        if name.is_empty() {
            continue;
        }
        let info = sym[4];
        let shndx = u16_at(sym, 6);
        // Local symbols are not part of the interface.
        if info >> 4 == 0 {
            continue;
        }
        if shndx == 0 {
            out.undefined.push(name);
        } else {
            out.defined.push(name);
        }
    }
    if let Some(dynamic) = elf.section(".dynamic") {
        let entries = elf.read(dynamic.offset, dynamic.size)?;
        let names = match elf.sections.get(dynamic.link as usize).cloned() {
            _ if dynamic.link == dynsym.link => strings.clone(),
            Some(s) => elf.read(s.offset, s.size)?,
            None => Vec::new(),
        };
        for e in entries.chunks_exact(16) {
            let (tag, val) = (u64_at(e, 0), u64_at(e, 8));
            if tag == 0 {
                break;
            }
            if tag == 1 {
                out.needed.push(c_str(&names, val as usize));
            }
        }
    }
    Ok(out)
}

/// The text that follows the first `needle` in a section (`.rodata`), up to its NUL:
/// a string a library was compiled with. Sections over 256 MiB are not read.
pub fn find_in_section(path: &Path, section: &str, needle: &[u8]) -> Option<String> {
    let mut elf = Elf::open(path).ok()?;
    let sec = elf.section(section)?;
    if sec.size > 256 << 20 || needle.is_empty() {
        return None;
    }
    let data = elf.read(sec.offset, sec.size).ok()?;
    let first = needle[0];
    let mut from = 0;
    while let Some(i) = data[from..].iter().position(|&b| b == first) {
        let at = from + i;
        if data[at..].starts_with(needle) {
            let rest = &data[at + needle.len()..];
            let end = rest
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(rest.len())
                .min(256);
            return Some(String::from_utf8_lossy(&rest[..end]).into_owned());
        }
        from = at + 1;
    }
    None
}

/// The magic number of a fat binary's container header.
const FATBIN_MAGIC: u32 = 0xBA55_ED50;

/// The architectures of the first fat binary in a library's `.nv_fatbin` section:
/// `sm_NN` for each CUBIN, `compute_NN` for each PTX, sorted. A library is compiled with one
/// set of `-gencode` flags, so its first translation unit speaks for all of them; reading
/// only that one keeps this to a few small reads of a library of hundreds of megabytes.
/// `None` for a missing file or one without device code.
pub fn fatbin_archs(path: &Path) -> Option<Vec<String>> {
    let mut elf = Elf::open(path).ok()?;
    let sec = elf.section(".nv_fatbin")?;
    let head = elf.read(sec.offset, 16).ok()?;
    if u32_at(&head, 0) != FATBIN_MAGIC {
        return None;
    }
    let header_size = u64::from(u16_at(&head, 6));
    let fat_size = u64_at(&head, 8);
    let end = sec
        .offset
        .checked_add(header_size)?
        .checked_add(fat_size)?
        .min(sec.offset + sec.size);
    let mut at = sec.offset + header_size;
    let mut archs = std::collections::BTreeSet::new();
    // A container holds one entry per architecture and kind; 256 is far beyond any build.
    for _ in 0..256 {
        if at + 64 > end {
            break;
        }
        let e = elf.read(at, 64).ok()?;
        let kind = u16_at(&e, 0);
        let entry_header = u64::from(u32_at(&e, 4));
        let size = u64_at(&e, 8);
        let arch = u32_at(&e, 28);
        match kind {
            1 => archs.insert(format!("compute_{arch}")),
            2 => archs.insert(format!("sm_{arch}")),
            _ => false,
        };
        if entry_header == 0 {
            break;
        }
        at = at.checked_add(entry_header)?.checked_add(size)?;
    }
    (!archs.is_empty()).then(|| archs.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_test_binary() {
        // The test binary is an ELF executable with a dynamic symbol table (it links libc).
        let me = std::env::current_exe().unwrap();
        let syms = dynamic_symbols(&me).unwrap();
        assert!(
            syms.undefined
                .iter()
                .any(|s| s == "malloc" || s.starts_with("malloc"))
        );
        assert!(syms.needed.iter().any(|n| n.starts_with("libc.so")));
        assert_eq!(fatbin_archs(&me), None);
    }

    #[test]
    fn hostile_files_are_refused_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.so");
        std::fs::write(&p, b"not an elf").unwrap();
        assert!(dynamic_symbols(&p).is_err());
        // A header whose section table lies past the end of the file.
        let mut head = vec![0u8; 64];
        head[..6].copy_from_slice(b"\x7fELF\x02\x01");
        head[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        head[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        head[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        std::fs::write(&p, &head).unwrap();
        let e = dynamic_symbols(&p).unwrap_err().to_string();
        assert!(e.contains("past the end"), "{e}");
        assert_eq!(fatbin_archs(&p), None);
    }
}
