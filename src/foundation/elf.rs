//! A small, bounded reader of ELF files: the section table and the symbol table, no more.
//!
//! Cubins are ELF64 little-endian files (`e_machine` 190, EM_CUDA); a kernel is a function
//! symbol whose `st_other` carries `STO_CUDA_ENTRY`, and the facts ptxas records about it
//! (registers, shared memory) live in sections named after it (`.nv.info.NAME`). Host
//! objects that nvcc writes (`nvcc -c`) carry their device code as a fat binary in the
//! `.nv_fatbin` section. Every artifact comes from a compiler repro does not trust, so every
//! offset and size is checked against the file before it is read; a malformed file is an
//! [`ElfError`], never a panic or a read past the end.
//!
//! The API is what build checks and resource reports share: [`Elf::parse`], the sections
//! ([`Elf::sections`], [`Elf::section`], [`Elf::data`]), the symbols ([`Elf::symbols`]) and
//! the kernels of a cubin ([`Elf::kernels`]).

/// `e_machine` of a cubin.
pub const EM_CUDA: u16 = 190;
/// The `st_other` bit that marks a kernel (an entry point) in a cubin.
pub const STO_CUDA_ENTRY: u8 = 0x10;
/// `st_info` type of a function symbol.
pub const STT_FUNC: u8 = 2;
/// `sh_type` of a symbol table.
pub const SHT_SYMTAB: u32 = 2;
/// `sh_type` of a section that occupies no bytes in the file.
pub const SHT_NOBITS: u32 = 8;

/// The most sections a file may declare: far above any compiler's output, low enough that
/// a hostile header cannot make the reader allocate without bound.
const MAX_SECTIONS: usize = 1 << 16;
/// The longest name read from a string table.
const MAX_NAME: usize = 4096;

/// Why bytes cannot be read as ELF.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// The bytes do not start with the ELF magic.
    #[error("not an ELF file")]
    NotElf,
    /// An ELF file of a class or byte order this reader does not handle.
    #[error("unsupported ELF file: {what}")]
    Unsupported {
        /// What it is.
        what: &'static str,
    },
    /// A header, table or name points outside the file.
    #[error("malformed ELF file: {what} lies outside the file")]
    Truncated {
        /// The part that does.
        what: String,
    },
}

/// One section header, with its name resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// Its index in the section table.
    pub index: usize,
    /// Its name (`.text.my_kernel`, `.nv.info`).
    pub name: String,
    /// `sh_type`.
    pub kind: u32,
    /// `sh_flags`.
    pub flags: u64,
    /// Where its bytes start in the file.
    pub offset: u64,
    /// How many bytes it has.
    pub size: u64,
    /// `sh_link`.
    pub link: u32,
    /// `sh_info` (for a cubin's per-kernel sections, the index of the kernel's symbol or
    /// text section).
    pub info: u32,
    /// `sh_entsize`.
    pub entsize: u64,
}

/// One symbol table entry, with its name resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Its name (mangled for C++).
    pub name: String,
    /// `ST_TYPE(st_info)`: 2 for a function.
    pub kind: u8,
    /// `ST_BIND(st_info)`: 0 local, 1 global, 2 weak.
    pub bind: u8,
    /// `st_other` (visibility, and in a cubin the entry bit).
    pub other: u8,
    /// `st_shndx`: the section it is defined in.
    pub section: u16,
    /// `st_value`.
    pub value: u64,
    /// `st_size`.
    pub size: u64,
}

impl Symbol {
    /// Whether this is a kernel of a cubin: a function marked as an entry point.
    pub fn is_kernel(&self) -> bool {
        self.kind == STT_FUNC && self.other & STO_CUDA_ENTRY != 0
    }
}

/// A parsed ELF64 little-endian file, borrowing its bytes.
#[derive(Clone, Debug)]
pub struct Elf<'a> {
    bytes: &'a [u8],
    machine: u16,
    sections: Vec<Section>,
}

/// Whether `bytes` start with the ELF magic.
pub fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

fn slice<'a>(bytes: &'a [u8], offset: u64, len: u64, what: &str) -> Result<&'a [u8], ElfError> {
    let start = usize::try_from(offset).ok();
    let end = start.and_then(|s| s.checked_add(usize::try_from(len).ok()?));
    match (start, end) {
        (Some(s), Some(e)) if e <= bytes.len() => Ok(&bytes[s..e]),
        _ => Err(ElfError::Truncated {
            what: what.to_string(),
        }),
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("four bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

/// The NUL-terminated name at `offset` in a string table, bounded by the table and by
/// [`MAX_NAME`].
fn name_at(table: &[u8], offset: u32, what: &str) -> Result<String, ElfError> {
    let rest = table
        .get(offset as usize..)
        .ok_or_else(|| ElfError::Truncated {
            what: format!("the name of {what}"),
        })?;
    let len = rest
        .iter()
        .take(MAX_NAME)
        .position(|b| *b == 0)
        .ok_or_else(|| ElfError::Truncated {
            what: format!("the name of {what}"),
        })?;
    Ok(String::from_utf8_lossy(&rest[..len]).into_owned())
}

impl<'a> Elf<'a> {
    /// Reads the ELF header and the section table of `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Elf<'a>, ElfError> {
        if !is_elf(bytes) {
            return Err(ElfError::NotElf);
        }
        let header = slice(bytes, 0, 64, "the ELF header")?;
        if header[4] != 2 {
            return Err(ElfError::Unsupported {
                what: "32-bit (repro reads ELF64)",
            });
        }
        if header[5] != 1 {
            return Err(ElfError::Unsupported {
                what: "big-endian (repro reads little-endian ELF)",
            });
        }
        let machine = u16_at(header, 18);
        let shoff = u64_at(header, 40);
        let shentsize = u16_at(header, 58) as usize;
        let shnum = u16_at(header, 60) as usize;
        let shstrndx = u16_at(header, 62) as usize;
        if shnum == 0 {
            return Ok(Elf {
                bytes,
                machine,
                sections: Vec::new(),
            });
        }
        if shentsize < 64 || shnum > MAX_SECTIONS {
            return Err(ElfError::Truncated {
                what: "the section table".into(),
            });
        }
        let table = slice(
            bytes,
            shoff,
            (shentsize * shnum) as u64,
            "the section table",
        )?;
        let raw: Vec<&[u8]> = (0..shnum)
            .map(|i| &table[i * shentsize..i * shentsize + 64])
            .collect();
        let names = match raw.get(shstrndx) {
            Some(h) if shstrndx != 0 => slice(
                bytes,
                u64_at(h, 24),
                u64_at(h, 32),
                "the section name table",
            )?,
            _ => &[][..],
        };
        let mut sections = Vec::with_capacity(shnum);
        for (index, h) in raw.iter().enumerate() {
            let name = if names.is_empty() {
                String::new()
            } else {
                name_at(names, u32_at(h, 0), &format!("section {index}"))?
            };
            sections.push(Section {
                index,
                name,
                kind: u32_at(h, 4),
                flags: u64_at(h, 8),
                offset: u64_at(h, 24),
                size: u64_at(h, 32),
                link: u32_at(h, 40),
                info: u32_at(h, 44),
                entsize: u64_at(h, 56),
            });
        }
        Ok(Elf {
            bytes,
            machine,
            sections,
        })
    }

    /// `e_machine`: [`EM_CUDA`] for a cubin, 62 for an x86-64 host object.
    pub fn machine(&self) -> u16 {
        self.machine
    }

    /// Whether this is a cubin (device code).
    pub fn is_cuda(&self) -> bool {
        self.machine() == EM_CUDA
    }

    /// Every section, in table order.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    /// The first section called `name`.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections().iter().find(|s| s.name == name)
    }

    /// A section's bytes (none for a section that occupies no file space).
    pub fn data(&self, s: &Section) -> Result<&'a [u8], ElfError> {
        if s.kind == SHT_NOBITS {
            return Ok(&[]);
        }
        slice(
            self.bytes,
            s.offset,
            s.size,
            &format!("section `{}`", s.name),
        )
    }

    /// The symbols of the symbol table (`.symtab`), the null symbol left out; none when the
    /// file has no symbol table.
    pub fn symbols(&self) -> Result<Vec<Symbol>, ElfError> {
        let Some(table) = self.sections.iter().find(|s| s.kind == SHT_SYMTAB) else {
            return Ok(Vec::new());
        };
        let data = self.data(table)?;
        let strings = match self.sections.get(table.link as usize) {
            Some(s) if table.link != 0 => self.data(s)?,
            _ => {
                return Err(ElfError::Truncated {
                    what: "the symbol table's string table".into(),
                });
            }
        };
        let entsize = if table.entsize == 0 {
            24
        } else {
            table.entsize as usize
        };
        if entsize < 24 {
            return Err(ElfError::Truncated {
                what: "the symbol table's entries".into(),
            });
        }
        let mut out = Vec::with_capacity(data.len() / entsize);
        for (i, e) in data.chunks_exact(entsize).enumerate().skip(1) {
            out.push(Symbol {
                name: name_at(strings, u32_at(e, 0), &format!("symbol {i}"))?,
                kind: e[4] & 0xf,
                bind: e[4] >> 4,
                other: e[5],
                section: u16_at(e, 6),
                value: u64_at(e, 8),
                size: u64_at(e, 16),
            });
        }
        Ok(out)
    }

    /// The kernels of a cubin (symbols marked as entry points), sorted, as their symbols
    /// are spelled (mangled for C++ kernels). Empty for a file that is not a cubin.
    pub fn kernels(&self) -> Result<Vec<String>, ElfError> {
        if !self.is_cuda() {
            return Ok(Vec::new());
        }
        let mut k: Vec<String> = self
            .symbols()?
            .into_iter()
            .filter(Symbol::is_kernel)
            .map(|s| s.name)
            .collect();
        k.sort();
        k.dedup();
        Ok(k)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ELF64 LE file with the given machine, symbols `(name, st_info, st_other)`
    /// and one extra PROGBITS section `(name, bytes)`.
    pub(crate) fn build(machine: u16, symbols: &[(&str, u8, u8)], extra: (&str, &[u8])) -> Vec<u8> {
        // Section layout: 0 null, 1 .shstrtab, 2 .strtab, 3 .symtab, 4 extra.
        let shstr = format!("\0.shstrtab\0.strtab\0.symtab\0{}\0", extra.0).into_bytes();
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24];
        for (name, info, other) in symbols {
            let off = strtab.len() as u32;
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            let mut e = vec![0u8; 24];
            e[0..4].copy_from_slice(&off.to_le_bytes());
            e[4] = *info;
            e[5] = *other;
            e[6..8].copy_from_slice(&4u16.to_le_bytes());
            symtab.extend(e);
        }
        let mut file = vec![0u8; 64];
        let place = |data: &[u8], file: &mut Vec<u8>| {
            let at = file.len() as u64;
            file.extend_from_slice(data);
            at
        };
        let o_shstr = place(&shstr, &mut file);
        let o_str = place(&strtab, &mut file);
        let o_sym = place(&symtab, &mut file);
        let o_extra = place(extra.1, &mut file);
        let shoff = file.len() as u64;
        let header = |name: u32, kind: u32, off: u64, size: u64, link: u32, ent: u64| {
            let mut h = vec![0u8; 64];
            h[0..4].copy_from_slice(&name.to_le_bytes());
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[24..32].copy_from_slice(&off.to_le_bytes());
            h[32..40].copy_from_slice(&size.to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            h[56..64].copy_from_slice(&ent.to_le_bytes());
            h
        };
        file.extend(vec![0u8; 64]);
        file.extend(header(1, 3, o_shstr, shstr.len() as u64, 0, 0));
        file.extend(header(11, 3, o_str, strtab.len() as u64, 0, 0));
        file.extend(header(19, SHT_SYMTAB, o_sym, symtab.len() as u64, 2, 24));
        file.extend(header(27, 1, o_extra, extra.1.len() as u64, 0, 0));
        file[0..4].copy_from_slice(b"\x7fELF");
        file[4] = 2;
        file[5] = 1;
        file[6] = 1;
        file[18..20].copy_from_slice(&machine.to_le_bytes());
        file[40..48].copy_from_slice(&shoff.to_le_bytes());
        file[52..54].copy_from_slice(&64u16.to_le_bytes());
        file[58..60].copy_from_slice(&64u16.to_le_bytes());
        file[60..62].copy_from_slice(&5u16.to_le_bytes());
        file[62..64].copy_from_slice(&1u16.to_le_bytes());
        file
    }

    #[test]
    fn kernels_are_entry_functions_only() {
        let f = build(
            EM_CUDA,
            &[
                ("_Z2tkILi4EEvPf", 0x12, 0x10),
                ("plain", 0x12, 0x10),
                ("$plain$_Z6helperf", 0x02, 0),
                ("_Z2gdf", 0x12, 0),
                ("data", 0x11, 0x10),
            ],
            (".nv.info.plain", b"\x04\x11\x08\x00"),
        );
        let elf = Elf::parse(&f).unwrap();
        assert!(elf.is_cuda());
        assert_eq!(elf.kernels().unwrap(), ["_Z2tkILi4EEvPf", "plain"]);
        let s = elf.section(".nv.info.plain").unwrap();
        assert_eq!(elf.data(s).unwrap(), b"\x04\x11\x08\x00");
        assert_eq!(elf.symbols().unwrap().len(), 5);
        // A host object has no kernels, whatever its symbols' bits.
        let host = build(62, &[("plain", 0x12, 0x10)], (".nv_fatbin", b""));
        assert!(Elf::parse(&host).unwrap().kernels().unwrap().is_empty());
    }

    #[test]
    fn hostile_files_are_errors_not_panics() {
        let good = build(EM_CUDA, &[("k", 0x12, 0x10)], (".x", b"abc"));
        assert_eq!(Elf::parse(b"nope").unwrap_err(), ElfError::NotElf);
        let mut be = good.clone();
        be[5] = 2;
        assert!(matches!(Elf::parse(&be), Err(ElfError::Unsupported { .. })));
        // Every truncation and every corrupted byte either parses or fails cleanly.
        for cut in 0..good.len() {
            if let Ok(e) = Elf::parse(&good[..cut]) {
                let _ = e.kernels();
            }
        }
        for at in 0..good.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[at] = v;
                if let Ok(e) = Elf::parse(&bad) {
                    let _ = e.kernels();
                    for s in e.sections() {
                        let _ = e.data(s);
                    }
                }
            }
        }
    }
}
