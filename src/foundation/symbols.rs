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

/// The Itanium-mangled symbol of a C++ function `name` (`ns::k`, not a template) whose
/// parameter list is `params` as written (`const float* __restrict__ a, int n`), for the
/// parameter types this can spell: the built-in arithmetic types and the fixed-width and
/// `size_t` typedefs as Linux's LP64 defines them, CUDA's `__half`, `__nv_bfloat16` and
/// vector types (`float4`), the classes named in `classes` (declared at global scope),
/// and pointers, references and `const` of those. `None` for anything else (a template, an
/// array, a function pointer, `__restrict__` below the top level, an unknown typedef, and
/// any name in `blocked`: the source's own typedefs and its classes declared in a scope):
/// then the symbol is not guessed.
pub fn mangle(
    name: &str,
    params: &str,
    classes: &std::collections::BTreeSet<String>,
    blocked: &std::collections::BTreeSet<String>,
) -> Option<String> {
    let parts: Vec<&str> = name.split("::").collect();
    if parts.iter().any(|p| {
        p.is_empty()
            || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || p.starts_with(|c: char| c.is_ascii_digit())
    }) {
        return None;
    }
    let mut subs: Vec<String> = Vec::new();
    let mut out = String::from("_Z");
    if parts.len() == 1 {
        out.push_str(&format!("{}{}", name.len(), name));
    } else {
        out.push('N');
        let mut prefix = String::new();
        for (i, p) in parts.iter().enumerate() {
            prefix.push_str(&format!("{}{p}", p.len()));
            out.push_str(&format!("{}{p}", p.len()));
            // Every enclosing scope is a substitution candidate; the function itself is not.
            if i + 1 < parts.len() {
                subs.push(format!("N{prefix}"));
            }
        }
        out.push('E');
    }
    let params = params.trim();
    if params.is_empty() || params == "void" {
        out.push('v');
        return Some(out);
    }
    for p in split_params(params)? {
        let ty = param_type(&p, classes, blocked)?;
        out.push_str(&mangle_type(&ty, &mut subs));
    }
    Some(out)
}

/// A parameter type, as far as [`mangle`] spells them.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    Builtin(&'static str),
    Class(String),
    Const(Box<Ty>),
    Ptr(Box<Ty>),
    Ref(Box<Ty>),
}

/// Splits a parameter list at its top-level commas; `None` where it holds a template's
/// arguments, a function pointer or an array (not spelled here).
fn split_params(params: &str) -> Option<Vec<String>> {
    if params.contains(['<', '(', '[', '.']) {
        return None;
    }
    Some(params.split(',').map(|p| p.trim().to_string()).collect())
}

/// The built-in type that a run of type words spells (`unsigned long long`), as its code.
fn builtin(words: &[&str]) -> Option<&'static str> {
    let has = |w: &str| words.contains(&w);
    let longs = words.iter().filter(|w| **w == "long").count();
    let unsigned = has("unsigned");
    Some(match () {
        _ if has("void") => "v",
        _ if has("bool") => "b",
        _ if has("float") => "f",
        _ if has("double") && longs == 1 => "e",
        _ if has("double") => "d",
        _ if has("char") && unsigned => "h",
        _ if has("char") && has("signed") => "a",
        _ if has("char") => "c",
        _ if has("short") && unsigned => "t",
        _ if has("short") => "s",
        _ if longs == 2 && unsigned => "y",
        _ if longs == 2 => "x",
        _ if longs == 1 && unsigned => "m",
        _ if longs == 1 => "l",
        _ if unsigned => "j",
        _ if has("int") || has("signed") => "i",
        _ => return None,
    })
}

/// The type of one parameter as written, its name and default dropped.
fn param_type(
    p: &str,
    classes: &std::collections::BTreeSet<String>,
    blocked: &std::collections::BTreeSet<String>,
) -> Option<Ty> {
    const TYPE_WORDS: [&str; 10] = [
        "void", "bool", "char", "short", "int", "long", "float", "double", "signed", "unsigned",
    ];
    const VECTORS: [&str; 6] = ["char", "uchar", "short", "ushort", "int", "uint"];
    let p = p.split('=').next()?.trim();
    let mut toks: Vec<String> = Vec::new();
    let mut word = String::new();
    for c in p.chars().chain([' ']) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            toks.push(std::mem::take(&mut word));
        }
        match c {
            '*' | '&' => toks.push(c.to_string()),
            c if c.is_whitespace() => {}
            _ => return None,
        }
    }
    let restrict = |t: &str| matches!(t, "__restrict__" | "__restrict" | "restrict");
    // `float* __restrict__ p` qualifies the parameter itself, which the signature leaves
    // out; `float* __restrict__* pp` qualifies a pointer inside it, which it keeps.
    if let Some(last) = toks.iter().rposition(|t| restrict(t))
        && toks[last..].iter().any(|t| t == "*" || t == "&")
    {
        return None;
    }
    if toks
        .iter()
        .any(|t| blocked.contains(t.trim_start_matches("::")))
    {
        return None;
    }
    toks.retain(|t| !restrict(t) && !matches!(t.as_str(), "register" | "struct" | "class"));
    // The parameter's name: a last word after the type.
    if toks.len() > 1
        && let Some(last) = toks.last()
        && last.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && !TYPE_WORDS.contains(&last.as_str())
        && !matches!(last.as_str(), "const" | "volatile")
    {
        toks.pop();
    }
    // The base type: its words up to the first `*` or `&`, `const` anywhere among them.
    let split = toks
        .iter()
        .position(|t| t == "*" || t == "&")
        .unwrap_or(toks.len());
    let (base, rest) = toks.split_at(split);
    let is_const = base.iter().any(|t| t == "const");
    if base.iter().any(|t| t == "volatile") {
        return None;
    }
    let words: Vec<&str> = base
        .iter()
        .map(String::as_str)
        .filter(|t| *t != "const")
        .collect();
    let mut ty = if words.iter().all(|w| TYPE_WORDS.contains(w)) && !words.is_empty() {
        Ty::Builtin(builtin(&words)?)
    } else if let [one] = words.as_slice() {
        let one = one.trim_start_matches("::");
        match one {
            c if classes.contains(c) => Ty::Class(c.to_string()),
            "size_t" | "uint64_t" => Ty::Builtin("m"),
            "ptrdiff_t" | "int64_t" | "ssize_t" => Ty::Builtin("l"),
            "int32_t" => Ty::Builtin("i"),
            "uint32_t" => Ty::Builtin("j"),
            "int16_t" => Ty::Builtin("s"),
            "uint16_t" => Ty::Builtin("t"),
            "int8_t" => Ty::Builtin("a"),
            "uint8_t" => Ty::Builtin("h"),
            "half" | "__half" => Ty::Class("__half".into()),
            "nv_bfloat16" | "__nv_bfloat16" => Ty::Class("__nv_bfloat16".into()),
            v if ["float", "double", "long", "ulong", "longlong", "ulonglong"]
                .iter()
                .chain(VECTORS.iter())
                .any(|b| {
                    v.strip_prefix(b)
                        .is_some_and(|n| matches!(n, "1" | "2" | "3" | "4"))
                }) =>
            {
                Ty::Class(v.to_string())
            }
            c if classes.contains(c) => Ty::Class(c.to_string()),
            _ => return None,
        }
    } else {
        return None;
    };
    // `const` on the parameter itself (`const int n`) is not part of the signature.
    if is_const && !rest.is_empty() {
        ty = Ty::Const(Box::new(ty));
    }
    // Declarators from the inside out: `*`, `&`, and `const` after a `*` (which qualifies
    // that pointer; on the parameter itself it is dropped from the signature).
    let mut i = 0;
    while i < rest.len() {
        match rest[i].as_str() {
            "*" => ty = Ty::Ptr(Box::new(ty)),
            "&" => ty = Ty::Ref(Box::new(ty)),
            "const" => {
                if i + 1 < rest.len() {
                    ty = Ty::Const(Box::new(ty));
                }
            }
            _ => return None,
        }
        i += 1;
    }
    Some(ty)
}

/// A type's mangling, with the ABI's substitutions: a type seen before among `subs` (every
/// class, qualified type and pointer, in order) is written `S_`, `S0_`, `S1_`, ...
fn mangle_type(ty: &Ty, subs: &mut Vec<String>) -> String {
    let plain = spell(ty);
    if !matches!(ty, Ty::Builtin(_))
        && let Some(i) = subs.iter().position(|s| *s == plain)
    {
        return seq_id(i);
    }
    let text = match ty {
        Ty::Builtin(code) => return (*code).to_string(),
        Ty::Class(n) => format!("{}{n}", n.len()),
        Ty::Const(inner) => format!("K{}", mangle_type(inner, subs)),
        Ty::Ptr(inner) => format!("P{}", mangle_type(inner, subs)),
        Ty::Ref(inner) => format!("R{}", mangle_type(inner, subs)),
    };
    subs.push(plain);
    text
}

/// A type's mangling without substitutions: the key substitutions are looked up by.
fn spell(ty: &Ty) -> String {
    match ty {
        Ty::Builtin(code) => (*code).to_string(),
        Ty::Class(n) => format!("{}{n}", n.len()),
        Ty::Const(inner) => format!("K{}", spell(inner)),
        Ty::Ptr(inner) => format!("P{}", spell(inner)),
        Ty::Ref(inner) => format!("R{}", spell(inner)),
    }
}

/// The substitution `S_` (0), `S0_` (1), ..., `S9_`, `SA_`, ..., `SZ_`, `S10_`, ...
fn seq_id(i: usize) -> String {
    if i == 0 {
        return "S_".into();
    }
    let mut n = i - 1;
    let mut digits = Vec::new();
    loop {
        let d = (n % 36) as u8;
        digits.push(if d < 10 { b'0' + d } else { b'A' + d - 10 } as char);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    format!("S{}_", digits.iter().rev().collect::<String>())
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

    /// Symbols as g++ and nvcc spell them, substitutions included; a type not spelled here
    /// gives none rather than a guess.
    #[test]
    fn mangled_names_of_plain_signatures() {
        let classes: std::collections::BTreeSet<String> = ["P".to_string()].into();
        let blocked: std::collections::BTreeSet<String> = ["real".to_string()].into();
        let m = |n: &str, p: &str| mangle(n, p, &classes, &blocked);
        assert_eq!(m("k", "").as_deref(), Some("_Z1kv"));
        assert_eq!(m("k", "void").as_deref(), Some("_Z1kv"));
        assert_eq!(m("ovl", "float* x").as_deref(), Some("_Z3ovlPf"));
        assert_eq!(
            m(
                "k",
                "const float* __restrict__ a, const float *__restrict__ b, float* c, int n"
            )
            .as_deref(),
            Some("_Z1kPKfS0_Pfi")
        );
        assert_eq!(
            m("ns::k", "float* a, float* b").as_deref(),
            Some("_ZN2ns1kEPfS0_")
        );
        assert_eq!(m("a::b::k", "int").as_deref(), Some("_ZN1a1b1kEi"));
        assert_eq!(
            m("k", "unsigned long long n, size_t m, long l, unsigned u").as_deref(),
            Some("_Z1kymlj")
        );
        assert_eq!(
            m("k", "const P& p, P* q, const P* r, double** d").as_deref(),
            Some("_Z1kRK1PPS_PS0_PPd")
        );
        assert_eq!(
            m("k", "half* a, __half* b").as_deref(),
            Some("_Z1kP6__halfS0_")
        );
        assert_eq!(
            m("k", "float4 v, float4 w").as_deref(),
            Some("_Z1k6float4S_")
        );
        assert_eq!(
            m("k", "float* const p, const int n = 4").as_deref(),
            Some("_Z1kPfi")
        );
        assert_eq!(m("k", "float const* p").as_deref(), Some("_Z1kPKf"));
        // Not spelled: templates, arrays, function pointers, unknown typedefs, volatile.
        for p in [
            "Vec<float> v",
            "float a[4]",
            "void (*f)(int)",
            "scalar_t* x",
            "volatile int* v",
            "T x",
            "real* r",
            "float* __restrict__* pp",
        ] {
            assert_eq!(m("k", p), None, "{p}");
        }
        assert_eq!(seq_id(0), "S_");
        assert_eq!(seq_id(1), "S0_");
        assert_eq!(seq_id(11), "SA_");
        assert_eq!(seq_id(37), "S10_");
    }

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
