//! Kernel names as written in the source, matched against the symbols a compiler emits.
//!
//! An `extern "C"` kernel keeps its name; a C++ kernel gets an Itanium-mangled symbol that
//! also encodes its template arguments and parameter types
//! (`_Z14fa_s512_kernelILi512ELi64EEvPK6__half...`). A recipe names kernels as written
//! (`fa_s512_kernel`, or `ns::kernel`), so a recipe held fixed across a history does not
//! call a commit broken because a kernel's signature changed. Only the name is decoded;
//! nothing here needs a full demangler.

/// The qualified name a mangled symbol stands for (`_ZN2ns6kernelEv` → `ns::kernel`), or
/// `None` when `symbol` is not an Itanium-mangled function name.
pub fn source_name(symbol: &str) -> Option<String> {
    let mut rest = symbol.strip_prefix("_Z")?;
    // Internal linkage (a `static` kernel) is marked with `L`.
    rest = rest.strip_prefix('L').unwrap_or(rest);
    let nested = rest.starts_with('N');
    if nested {
        rest = &rest[1..];
        // CV- and ref-qualifiers of member functions come before the names.
        rest = rest.trim_start_matches(['K', 'V', 'r', 'R', 'O']);
    }
    let mut parts: Vec<&str> = Vec::new();
    loop {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            break;
        }
        let len: usize = rest[..digits].parse().ok()?;
        let name = rest.get(digits..digits + len)?;
        parts.push(name);
        rest = &rest[digits + len..];
        if !nested {
            break;
        }
    }
    if parts.is_empty() {
        return None;
    }
    // GCC and nvcc spell the anonymous namespace `_GLOBAL__N_1`; in a source it has no name.
    let parts: Vec<&str> = parts
        .into_iter()
        .filter(|p| !p.starts_with("_GLOBAL__N"))
        .collect();
    Some(parts.join("::"))
}

/// Whether `symbol` is the kernel written `entry` in the source.
pub fn matches(entry: &str, symbol: &str) -> bool {
    symbol == entry || source_name(symbol).is_some_and(|n| n == entry)
}

/// Why an entry name does not pick one symbol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No symbol has that name.
    #[error("no kernel `{entry}` in the module")]
    Missing {
        /// The name as written.
        entry: String,
    },
    /// Several symbols do (overloads, or several template instantiations).
    #[error("kernel `{entry}` is ambiguous: {}", .candidates.join(", "))]
    Ambiguous {
        /// The name as written.
        entry: String,
        /// The symbols it could mean.
        candidates: Vec<String>,
    },
}

/// The one symbol among `symbols` that `entry` names: an exact match first, else the only
/// mangled symbol whose source name is `entry`.
pub fn resolve<'a>(entry: &str, symbols: &'a [String]) -> Result<&'a str, ResolveError> {
    if let Some(s) = symbols.iter().find(|s| *s == entry) {
        return Ok(s);
    }
    let mut found: Vec<&String> = symbols.iter().filter(|s| matches(entry, s)).collect();
    found.sort();
    found.dedup();
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(ResolveError::Missing {
            entry: entry.to_string(),
        }),
        many => Err(ResolveError::Ambiguous {
            entry: entry.to_string(),
            candidates: many.iter().map(|s| s.to_string()).collect(),
        }),
    }
}

/// The entry points of a PTX module (`.entry NAME(`).
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| {
            let rest = &l[l.find(".entry ")? + ".entry ".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// Candidate symbol names in a binary (a CUBIN or fat binary): the NUL-terminated runs of
/// identifier characters, as ELF string tables hold them.
pub fn binary_symbols(bytes: &[u8]) -> Vec<String> {
    let mut out: Vec<String> = bytes
        .split(|b| *b == 0)
        .filter(|s| {
            !s.is_empty()
                && s.len() <= 4096
                && s.iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'$')
        })
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The kernels of a module: PTX entries when it is PTX text, a cubin's entry points (its
/// device functions are not kernels), else the names in the binary.
pub fn module_symbols(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    if text.contains(".entry ") && text.contains(".version") {
        return ptx_entries(&text);
    }
    if let Ok(elf) = crate::foundation::elf::Elf::parse(bytes)
        && elf.machine == crate::foundation::elf::EM_CUDA
        && let Ok(kernels) = cubin_kernels(&elf)
    {
        return kernels;
    }
    binary_symbols(bytes)
}

/// The `st_other` bit that marks a kernel (an entry point) among a cubin's functions.
pub const STO_CUDA_ENTRY: u8 = 0x10;

/// The kernels of a cubin: its function symbols marked as entry points (a `__device__`
/// function is not one), sorted, as their symbols are spelled. Empty for an ELF file that
/// is not a cubin (a host object's functions are host code).
pub fn cubin_kernels(
    elf: &crate::foundation::elf::Elf<'_>,
) -> Result<Vec<String>, crate::foundation::elf::ElfError> {
    if elf.machine != crate::foundation::elf::EM_CUDA {
        return Ok(Vec::new());
    }
    let mut k: Vec<String> = elf
        .symbols()?
        .into_iter()
        .filter(|s| s.kind == crate::foundation::elf::STT_FUNC && s.other & STO_CUDA_ENTRY != 0)
        .map(|s| s.name)
        .collect();
    k.sort();
    k.dedup();
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_mangled_kernels() {
        assert_eq!(
            source_name("_Z14fa_s512_kernelILi512ELi64EEvPK6__halfS2_S2_PS0_").as_deref(),
            Some("fa_s512_kernel")
        );
        assert_eq!(source_name("_Z6kernelPfi").as_deref(), Some("kernel"));
        assert_eq!(
            source_name("_ZN2ns6kernelEv").as_deref(),
            Some("ns::kernel")
        );
        assert_eq!(
            source_name("_ZN2ns5inner6kernelILi4EEEvPf").as_deref(),
            Some("ns::inner::kernel")
        );
        assert_eq!(source_name("_ZL6staticPf").as_deref(), Some("static"));
        assert_eq!(
            source_name("_ZN12_GLOBAL__N_16hiddenEv").as_deref(),
            Some("hidden")
        );
        assert_eq!(source_name("vector_add"), None);
        assert_eq!(source_name("_Z"), None);
        assert_eq!(source_name("_Z99short"), None);
    }

    #[test]
    fn resolution_prefers_exact_and_refuses_ambiguity() {
        let syms: Vec<String> = [
            "k",
            "_Z1kPf",
            "_Z3gemILi1EEvPf",
            "_Z3gemILi2EEvPf",
            "_Z3oneILi8EEvv",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(resolve("k", &syms), Ok("k"));
        assert_eq!(resolve("one", &syms), Ok("_Z3oneILi8EEvv"));
        assert!(matches!(
            resolve("gem", &syms),
            Err(ResolveError::Ambiguous { candidates, .. }) if candidates.len() == 2
        ));
        assert!(matches!(
            resolve("on", &syms),
            Err(ResolveError::Missing { .. })
        ));
    }

    /// nvcc 13.0's cubin (tests/fixtures/device/README.md): the kernels readelf marks as
    /// entry points, not the device function.
    #[test]
    fn kernels_of_a_real_cubin() {
        let bytes = include_bytes!("../../tests/fixtures/device/k.sm_90.cubin");
        let elf = crate::foundation::elf::Elf::parse(bytes).unwrap();
        let want = ["_Z2tkILi4EEvPf", "_ZN2ns5innerEPi", "plain"];
        assert_eq!(cubin_kernels(&elf).unwrap(), want);
        assert_eq!(module_symbols(bytes), want);
        assert!(binary_symbols(bytes).contains(&"$plain$_Z6helperf".to_string()));
    }

    #[test]
    fn symbols_of_binaries_and_ptx() {
        let bin = b"\x7fELF\0\0.text._Z6kernelPf\0_Z6kernelPf\0other\0\x01\x02\0";
        assert!(binary_symbols(bin).contains(&"_Z6kernelPf".to_string()));
        let ptx = ".version 8.0\n.visible .entry _Z6kernelPf(\n.param .u64 a\n)\n";
        assert_eq!(module_symbols(ptx.as_bytes()), ["_Z6kernelPf"]);
    }
}
