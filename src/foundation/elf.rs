//! A small, bounded reader of 64-bit little-endian ELF files: the header, the sections and
//! the symbol table. CUDA cubins are such files (machine `EM_CUDA`); nothing here is
//! specific to them, so any ELF64 object can be listed.
//!
//! The bytes come from elsewhere (a compiler's output, an artifact in a bundle): every
//! offset and size is checked against the buffer before it is used, and a malformed file is
//! an [`ElfError`], never a panic or an out-of-bounds read.

/// `e_machine` of a CUDA cubin.
pub const EM_CUDA: u16 = 190;
/// `sh_type` of a section that takes no space in the file (`.bss`, `.nv.shared.*`).
pub const SHT_NOBITS: u32 = 8;
/// `sh_type` of a symbol table.
pub const SHT_SYMTAB: u32 = 2;
/// `st_info` type of a function symbol.
pub const STT_FUNC: u8 = 2;

/// The most sections a file may declare: far above any real object, low enough that a
/// hostile header cannot make the reader allocate without bound.
const MAX_SECTIONS: usize = 1 << 16;

/// Why bytes are not a readable ELF64 file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// It does not start with `\x7fELF`.
    #[error("not an ELF file (no \\x7fELF magic)")]
    NotElf,
    /// A 32-bit or big-endian file.
    #[error("unsupported ELF flavour: {what} (only 64-bit little-endian files are read)")]
    Unsupported {
        /// What it is.
        what: &'static str,
    },
    /// A header, table or name lies (partly) outside the file.
    #[error("truncated or malformed ELF: {what}")]
    Malformed {
        /// Which structure.
        what: String,
    },
}

/// One section header, with its name resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// Its index in the section header table.
    pub index: usize,
    /// Its name (`.text.kernel`, `.nv.info`).
    pub name: String,
    /// `sh_type`.
    pub kind: u32,
    /// `sh_flags`.
    pub flags: u64,
    /// `sh_offset`.
    pub offset: u64,
    /// `sh_size`: bytes in the file, or (for [`SHT_NOBITS`]) bytes it occupies at run time.
    pub size: u64,
    /// `sh_link`.
    pub link: u32,
    /// `sh_info`.
    pub info: u32,
    /// `sh_entsize`.
    pub entsize: u64,
}

/// One symbol of the symbol table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Its index in the symbol table.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// `st_value`.
    pub value: u64,
    /// `st_size`.
    pub size: u64,
    /// The type: the low four bits of `st_info` ([`STT_FUNC`], ...).
    pub kind: u8,
    /// The binding: the high four bits of `st_info` (0 local, 1 global, 2 weak).
    pub bind: u8,
    /// `st_other`.
    pub other: u8,
    /// `st_shndx`: the index of the section it is defined in.
    pub section: u16,
}

/// A parsed ELF64 file borrowing its bytes.
#[derive(Clone, Debug)]
pub struct Elf<'a> {
    data: &'a [u8],
    /// `e_ident[EI_ABIVERSION]`.
    pub abi_version: u8,
    /// `e_machine`.
    pub machine: u16,
    /// `e_flags`.
    pub flags: u32,
    sections: Vec<Section>,
}

fn malformed(what: impl Into<String>) -> ElfError {
    ElfError::Malformed { what: what.into() }
}

/// `len` bytes at `off`, or an error naming `what`.
fn slice<'a>(data: &'a [u8], off: u64, len: u64, what: &str) -> Result<&'a [u8], ElfError> {
    let start = usize::try_from(off).map_err(|_| malformed(what))?;
    let len = usize::try_from(len).map_err(|_| malformed(what))?;
    let end = start.checked_add(len).ok_or_else(|| malformed(what))?;
    data.get(start..end)
        .ok_or_else(|| malformed(format!("{what} (bytes {start}..{end} of {})", data.len())))
}

/// Little-endian integers at an offset of a slice already known to be long enough.
pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// The NUL-terminated string at `off` of a string table.
fn name_at(table: &[u8], off: u32, what: &str) -> Result<String, ElfError> {
    let rest = table.get(off as usize..).ok_or_else(|| {
        malformed(format!(
            "{what}: name offset {off} outside its string table"
        ))
    })?;
    let end = rest
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| malformed(format!("{what}: unterminated name")))?;
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

impl<'a> Elf<'a> {
    /// Parses the header and the section headers.
    pub fn parse(data: &'a [u8]) -> Result<Self, ElfError> {
        if data.len() < 4 || &data[..4] != b"\x7fELF" {
            return Err(ElfError::NotElf);
        }
        let ident = slice(data, 0, 64, "ELF header")?;
        if ident[4] != 2 {
            return Err(ElfError::Unsupported { what: "32-bit" });
        }
        if ident[5] != 1 {
            return Err(ElfError::Unsupported { what: "big-endian" });
        }
        let shoff = u64_at(ident, 0x28);
        let shentsize = u16_at(ident, 0x3a);
        let shnum = u16_at(ident, 0x3c) as usize;
        let shstrndx = u16_at(ident, 0x3e) as usize;
        if shnum > 0 && shentsize < 64 {
            return Err(malformed(format!("section header size {shentsize}")));
        }
        if shnum > MAX_SECTIONS {
            return Err(malformed(format!("{shnum} sections")));
        }
        let mut raw = Vec::with_capacity(shnum);
        for i in 0..shnum {
            let at = shoff
                .checked_add(i as u64 * u64::from(shentsize))
                .ok_or_else(|| malformed("section header table offset"))?;
            let h = slice(data, at, 64, &format!("section header {i}"))?;
            raw.push((
                u32_at(h, 0),
                Section {
                    index: i,
                    name: String::new(),
                    kind: u32_at(h, 4),
                    flags: u64_at(h, 8),
                    offset: u64_at(h, 0x18),
                    size: u64_at(h, 0x20),
                    link: u32_at(h, 0x28),
                    info: u32_at(h, 0x2c),
                    entsize: u64_at(h, 0x38),
                },
            ));
        }
        let mut sections = Vec::with_capacity(shnum);
        if shnum > 0 {
            let strtab = raw
                .get(shstrndx)
                .ok_or_else(|| malformed(format!("section name table index {shstrndx}")))?;
            let names = slice(data, strtab.1.offset, strtab.1.size, "section name table")?;
            for (name_off, mut s) in raw {
                s.name = name_at(names, name_off, &format!("section {}", s.index))?;
                sections.push(s);
            }
        }
        Ok(Elf {
            data,
            abi_version: ident[8],
            machine: u16_at(ident, 0x12),
            flags: u32_at(ident, 0x30),
            sections,
        })
    }

    /// Every section, in header order.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    /// The first section called `name`.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// A section's bytes in the file (none for [`SHT_NOBITS`]).
    pub fn data(&self, s: &Section) -> Result<&'a [u8], ElfError> {
        if s.kind == SHT_NOBITS {
            return Ok(&[]);
        }
        slice(self.data, s.offset, s.size, &format!("section {}", s.name))
    }

    /// The symbols of the (first) symbol table, in table order; none if it has no table.
    pub fn symbols(&self) -> Result<Vec<Symbol>, ElfError> {
        let Some(tab) = self.sections.iter().find(|s| s.kind == SHT_SYMTAB) else {
            return Ok(Vec::new());
        };
        let bytes = self.data(tab)?;
        let names = self
            .sections
            .get(tab.link as usize)
            .ok_or_else(|| malformed(format!("{}: string table {}", tab.name, tab.link)))?;
        let names = self.data(names)?;
        bytes
            .chunks_exact(24)
            .enumerate()
            .map(|(index, e)| {
                Ok(Symbol {
                    index,
                    name: name_at(names, u32_at(e, 0), &format!("symbol {index}"))?,
                    kind: e[4] & 0xf,
                    bind: e[4] >> 4,
                    other: e[5],
                    section: u16_at(e, 6),
                    value: u64_at(e, 8),
                    size: u64_at(e, 16),
                })
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ELF64 file built from `(name, type, bytes)` sections (a `.shstrtab` is
    /// added last) for tests of this reader and of the cubin decoder.
    pub(crate) fn build(machine: u16, flags: u32, sections: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut names = vec![0u8];
        let mut name_offs = Vec::new();
        for (n, _, _) in sections.iter().chain([&(".shstrtab", 3, Vec::new())]) {
            name_offs.push(names.len() as u32);
            names.extend_from_slice(n.as_bytes());
            names.push(0);
        }
        let mut out = vec![0u8; 64];
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = 2;
        out[5] = 1;
        out[6] = 1;
        out[8] = 8;
        out[0x12..0x14].copy_from_slice(&machine.to_le_bytes());
        out[0x30..0x34].copy_from_slice(&flags.to_le_bytes());
        let mut placed = Vec::new();
        for (_, kind, bytes) in sections {
            placed.push((out.len() as u64, bytes.len() as u64, *kind));
            if *kind != SHT_NOBITS {
                out.extend_from_slice(bytes);
            }
        }
        placed.push((out.len() as u64, names.len() as u64, 3));
        out.extend_from_slice(&names);
        let shoff = out.len() as u64;
        let shnum = placed.len() + 1;
        out.extend_from_slice(&[0u8; 64]);
        for (i, (off, size, kind)) in placed.iter().enumerate() {
            let mut h = [0u8; 64];
            h[..4].copy_from_slice(&name_offs[i].to_le_bytes());
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&off.to_le_bytes());
            h[0x20..0x28].copy_from_slice(&size.to_le_bytes());
            // A symbol table links to the section before it (its string table).
            if *kind == SHT_SYMTAB {
                h[0x28..0x2c].copy_from_slice(&(i as u32).to_le_bytes());
                h[0x38..0x40].copy_from_slice(&24u64.to_le_bytes());
            }
            out.extend_from_slice(&h);
        }
        out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        out[0x3c..0x3e].copy_from_slice(&(shnum as u16).to_le_bytes());
        out[0x3e..0x40].copy_from_slice(&((shnum - 1) as u16).to_le_bytes());
        out
    }

    /// A symbol table entry.
    pub(crate) fn sym(name: u32, info: u8, shndx: u16, size: u64) -> Vec<u8> {
        let mut e = vec![0u8; 24];
        e[..4].copy_from_slice(&name.to_le_bytes());
        e[4] = info;
        e[6..8].copy_from_slice(&shndx.to_le_bytes());
        e[16..24].copy_from_slice(&size.to_le_bytes());
        e
    }

    #[test]
    fn sections_and_symbols() {
        let strtab = b"\0kern\0".to_vec();
        let mut symtab = sym(0, 0, 0, 0);
        symtab.extend(sym(1, (1 << 4) | STT_FUNC, 3, 32));
        let elf = build(
            EM_CUDA,
            0x0600_5a04,
            &[
                (".strtab", 3, strtab),
                (".symtab", SHT_SYMTAB, symtab),
                (".text.kern", 1, vec![0xaa; 32]),
                (".nv.shared.kern", SHT_NOBITS, vec![0; 4096]),
            ],
        );
        let e = Elf::parse(&elf).unwrap();
        assert_eq!(e.machine, EM_CUDA);
        assert_eq!(e.flags, 0x0600_5a04);
        let names: Vec<&str> = e.sections().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "",
                ".strtab",
                ".symtab",
                ".text.kern",
                ".nv.shared.kern",
                ".shstrtab"
            ]
        );
        let text = e.section(".text.kern").unwrap();
        assert_eq!(e.data(text).unwrap(), &[0xaa; 32][..]);
        let shared = e.section(".nv.shared.kern").unwrap();
        assert_eq!((shared.size, e.data(shared).unwrap().len()), (4096, 0));
        let syms = e.symbols().unwrap();
        assert_eq!(syms.len(), 2);
        assert_eq!(syms[1].name, "kern");
        assert_eq!(
            (syms[1].kind, syms[1].bind, syms[1].section),
            (STT_FUNC, 1, 3)
        );
        assert_eq!(syms[1].size, 32);
    }

    /// Every prefix of a valid file and some hostile headers are errors, never panics.
    #[test]
    fn hostile_bytes_are_errors() {
        let elf = build(EM_CUDA, 0, &[(".text.k", 1, vec![1; 40])]);
        for n in 0..elf.len() {
            let _ = Elf::parse(&elf[..n]).and_then(|e| {
                for s in e.sections() {
                    e.data(s)?;
                }
                e.symbols()
            });
        }
        assert_eq!(Elf::parse(b"MZ\0\0").unwrap_err(), ElfError::NotElf);
        let mut b32 = elf.clone();
        b32[4] = 1;
        assert!(matches!(
            Elf::parse(&b32),
            Err(ElfError::Unsupported { .. })
        ));
        // A section whose size runs past the end of the file.
        let mut big = elf.clone();
        let shoff = u64_at(&big, 0x28) as usize;
        big[shoff + 64 + 0x20..shoff + 64 + 0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = Elf::parse(&big).unwrap();
        assert!(matches!(
            e.data(&e.sections()[1]),
            Err(ElfError::Malformed { .. })
        ));
        // A section header table outside the file.
        let mut far = elf;
        far[0x28..0x30].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        assert!(matches!(Elf::parse(&far), Err(ElfError::Malformed { .. })));
    }
}
