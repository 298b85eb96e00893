//! The kernels a build's artifacts contain, and which of a recipe's `entries` they lack.
//!
//! Device code is read for what it is, whichever compiler wrote it: PTX by its `.entry`
//! directives, a cubin by its symbol table (functions marked as entry points; see
//! [`crate::foundation::symbols::cubin_kernels`]), a fat binary member by member (each target's cubin or PTX;
//! see [`crate::foundation::fatbin`]), and a host object from `nvcc -c` by the fat binary
//! in its `.nv_fatbin` section. An entry must be in every device module the build made (a
//! kernel left out of one target of a fat binary is missing). Outputs that are not device
//! code (a command build's shared library) are searched for the names in their string
//! tables, as before.

use crate::foundation::elf::{self, Elf};
use crate::foundation::fatbin::{self, Kind};
use crate::foundation::symbols;

/// The kernels of PTX text, sorted.
fn ptx_kernels(text: &[u8]) -> Vec<String> {
    let mut k = symbols::ptx_entries(&String::from_utf8_lossy(text));
    k.sort();
    k.dedup();
    k
}

/// One device module of a build: a PTX file, a cubin, or one member of a fat binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Where it is: `cubin`, `fatbin sm_90`, `object compute_90`.
    pub label: String,
    /// Its kernels, as their symbols are spelled, sorted.
    pub kernels: Vec<String>,
}

/// The kernels of a build's outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Every device module found.
    pub modules: Vec<Module>,
    /// Device modules that cannot be read here (a compressed fat binary member), by label
    /// and why.
    pub unreadable: Vec<String>,
    /// Names found in outputs that are not device code.
    pub other: Vec<String>,
}

impl Listing {
    /// Every kernel of every device module, sorted, once each.
    pub fn kernels(&self) -> Vec<String> {
        let mut k: Vec<String> = self
            .modules
            .iter()
            .flat_map(|m| m.kernels.iter().cloned())
            .collect();
        k.sort();
        k.dedup();
        k
    }

    /// Which of `entries` are missing: from any device module when there are some, else
    /// from the other outputs' names. Entries are names as written in the source; a C++
    /// kernel matches its mangled symbol.
    pub fn missing(&self, entries: &[String]) -> Vec<String> {
        let lacks = |e: &String, names: &[String]| symbols::resolve(e, names).is_err();
        entries
            .iter()
            .filter(|e| {
                if self.modules.is_empty() && self.unreadable.is_empty() {
                    lacks(e, &self.other)
                } else {
                    // An unreadable module cannot vouch for an entry.
                    !self.unreadable.is_empty() || self.modules.iter().any(|m| lacks(e, &m.kernels))
                }
            })
            .cloned()
            .collect()
    }
}

/// Lists the kernels of every output (`(name, bytes)`: `ptx`, `cubin`, `fatbin`, `object`, or
/// a command build's declared path).
pub fn list(outputs: &[(String, Vec<u8>)]) -> Listing {
    let mut l = Listing::default();
    for (name, bytes) in outputs {
        read(&mut l, name, bytes);
    }
    l.other.sort();
    l.other.dedup();
    l
}

fn read(l: &mut Listing, label: &str, bytes: &[u8]) {
    let is_ptx_name = label == "ptx" || label.ends_with(".ptx");
    if is_ptx_name || looks_like_ptx(bytes) {
        l.modules.push(Module {
            label: label.to_string(),
            kernels: ptx_kernels(bytes),
        });
        return;
    }
    if fatbin::is_fatbin(bytes) {
        read_fatbin(l, label, bytes);
        return;
    }
    if let Ok(e) = Elf::parse(bytes) {
        if e.machine == elf::EM_CUDA {
            match symbols::cubin_kernels(&e) {
                Ok(kernels) => l.modules.push(Module {
                    label: label.to_string(),
                    kernels,
                }),
                Err(why) => l.unreadable.push(format!("{label}: {why}")),
            }
            return;
        }
        // A host object or library from nvcc: its device code is a fat binary.
        if let Some(data) = e.section(".nv_fatbin").and_then(|s| e.data(s).ok())
            && fatbin::is_fatbin(data)
        {
            read_fatbin(l, label, data);
            return;
        }
    }
    l.other.extend(symbols::binary_symbols(bytes));
}

fn read_fatbin(l: &mut Listing, label: &str, bytes: &[u8]) {
    let members = match fatbin::members(bytes) {
        Ok(m) => m,
        Err(why) => {
            l.unreadable.push(format!("{label}: {why}"));
            return;
        }
    };
    for m in members {
        let where_ = format!("{label} {}", m.target());
        if m.compressed {
            l.unreadable.push(format!(
                "{where_} uses the pre-CUDA-13 compression, which repro does not unpack; its kernels cannot be listed"
            ));
            continue;
        }
        match m.kind {
            Kind::Ptx => {
                let end = m
                    .payload
                    .iter()
                    .position(|b| *b == 0)
                    .unwrap_or(m.payload.len());
                l.modules.push(Module {
                    label: where_,
                    kernels: ptx_kernels(&m.payload[..end]),
                });
            }
            Kind::Elf => match Elf::parse(&m.payload).and_then(|e| symbols::cubin_kernels(&e)) {
                Ok(kernels) => l.modules.push(Module {
                    label: where_,
                    kernels,
                }),
                Err(why) => l.unreadable.push(format!("{where_}: {why}")),
            },
            Kind::Other(_) => {}
        }
    }
}

/// PTX text starts (after comments) with `.version`; a binary never does.
fn looks_like_ptx(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    std::str::from_utf8(head).is_ok_and(|t| t.contains(".version") && t.contains(".target"))
}

/// A symbol as a listing shows it: the symbol, and for a C++ kernel the name it has in the
/// source (`_Z2tkILi4EEvPf (tk)`).
pub fn shown(symbol: &str) -> String {
    match symbols::source_name(symbol) {
        Some(n) if n != symbol => format!("{symbol} ({n})"),
        _ => symbol.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foundation::elf::tests::{build, sym};
    use crate::foundation::fatbin::tests::build as fat_file;

    /// An ELF file of `machine` with `symbols` (name, st_info, st_other) and one more
    /// section `(name, bytes)`.
    fn elf_file(machine: u16, symbols: &[(&str, u8, u8)], extra: (&str, &[u8])) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut symtab = sym(0, 0, 0, 0);
        for (name, info, other) in symbols {
            let mut e = sym(strtab.len() as u32, *info, 3, 0);
            e[5] = *other;
            symtab.extend(e);
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
        }
        build(
            machine,
            0,
            &[
                (".strtab", 3, strtab),
                (".symtab", elf::SHT_SYMTAB, symtab),
                (extra.0, 1, extra.1.to_vec()),
            ],
        )
    }

    fn cubin(kernels: &[&str]) -> Vec<u8> {
        let syms: Vec<(&str, u8, u8)> = kernels
            .iter()
            .map(|k| (*k, 0x12, symbols::STO_CUDA_ENTRY))
            .chain([("$k$_Z6helperf", 0x02, 0)])
            .collect();
        elf_file(elf::EM_CUDA, &syms, (".text", b""))
    }

    #[test]
    fn cubins_list_their_entry_points() {
        let outs = vec![("cubin".to_string(), cubin(&["_Z2tkILi4EEvPf", "plain"]))];
        let l = list(&outs);
        assert_eq!(l.kernels(), ["_Z2tkILi4EEvPf", "plain"]);
        assert!(l.missing(&["tk".into(), "plain".into()]).is_empty());
        // A device function is not a kernel, though its name is in the string table.
        assert_eq!(l.missing(&["helper".into()]), ["helper"]);
        assert_eq!(shown("_Z2tkILi4EEvPf"), "_Z2tkILi4EEvPf (tk)");
        assert_eq!(shown("plain"), "plain");
    }

    #[test]
    fn fat_binaries_and_objects_are_read_per_target() {
        let a = cubin(&["k", "only89"]);
        let b = cubin(&["k"]);
        let fat = fat_file(&[(2, 89, 0x11, &a), (2, 90, 0x11, &b)]);
        let l = list(&[("fatbin".to_string(), fat.clone())]);
        let labels: Vec<&str> = l.modules.iter().map(|m| m.label.as_str()).collect();
        assert_eq!(labels, ["fatbin sm_89", "fatbin sm_90"]);
        assert!(l.missing(&["k".into()]).is_empty());
        // Missing from one target is missing.
        assert_eq!(l.missing(&["only89".into()]), ["only89"]);
        // An nvcc -c object carries the fat binary in a section.
        let obj = elf_file(62, &[("_Z1kv", 0x12, 0)], (".nv_fatbin", &fat));
        let l = list(&[("object".to_string(), obj)]);
        assert_eq!(l.modules.len(), 2);
        assert_eq!(l.kernels(), ["k", "only89"]);
        // A member in the older compression cannot vouch for anything.
        let packed = fat_file(&[(2, 90, 0x2011, b"xx")]);
        let l = list(&[("fatbin".to_string(), packed)]);
        assert_eq!(l.missing(&["k".into()]), ["k"]);
        assert!(
            l.unreadable[0].contains("compression"),
            "{:?}",
            l.unreadable
        );
    }

    /// Bytes nvcc 13.0 wrote (tests/fixtures/device/README.md says how): what readelf
    /// and cuobjdump show of them is what this module reads.
    #[test]
    fn real_nvcc_output() {
        let want = ["_Z2tkILi4EEvPf", "_ZN2ns5innerEPi", "plain"];
        let cubin = include_bytes!("../../../tests/fixtures/device/k.sm_90.cubin").to_vec();
        let l = list(&[("cubin".to_string(), cubin)]);
        assert_eq!(l.kernels(), want);
        assert!(
            l.missing(&["tk".into(), "ns::inner".into(), "plain".into()])
                .is_empty()
        );
        assert_eq!(l.missing(&["helper".into()]), ["helper"]);
        let fat = include_bytes!("../../../tests/fixtures/device/k.fatbin").to_vec();
        let l = list(&[("fatbin".to_string(), fat)]);
        let labels: Vec<&str> = l.modules.iter().map(|m| m.label.as_str()).collect();
        assert_eq!(labels, ["fatbin sm_89", "fatbin compute_90"]);
        for m in &l.modules {
            assert_eq!(m.kernels, want, "{}", m.label);
        }
        assert!(l.unreadable.is_empty());
        // CUDA 13's zstd compression (-compress-mode=size) is unpacked.
        let packed = include_bytes!("../../../tests/fixtures/device/k.zstd.fatbin").to_vec();
        let l = list(&[("fatbin".to_string(), packed)]);
        assert_eq!(l.modules.len(), 1, "{l:?}");
        assert_eq!(l.modules[0].kernels, want);
    }

    #[test]
    fn ptx_and_other_outputs() {
        let ptx = ".version 9.0\n.target sm_90\n.visible .entry vector_add(\n";
        let l = list(&[("k.ptx".to_string(), ptx.as_bytes().to_vec())]);
        assert_eq!(l.kernels(), ["vector_add"]);
        let so = b"\x7fELF\0\0my_kernel\0.text".to_vec();
        let l = list(&[("lib.so".to_string(), so)]);
        assert!(l.modules.is_empty());
        assert!(l.missing(&["my_kernel".into()]).is_empty());
        assert_eq!(l.missing(&["my_kern".into()]), ["my_kern"]);
    }
}
