//! Why an extension module does not import (`repro env why-import`): it is imported the
//! way a build checks it (a fresh interpreter, PyTorch first); if the loader names an
//! undefined symbol, the symbol is demangled and looked for, under the same name with
//! another signature, among the dynamic symbols of this environment's PyTorch libraries
//! (read from their ELF files, no tools run); what the extension was built against (its
//! build record, found by the module's sha256, when repro built it) is set beside what
//! this environment has, and the differences are said in words with the rebuild command.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::engines::build::{CompileError, torch};
use crate::foundation::pyenv::PyEnv;
use crate::foundation::records::{self, BuildRecord};
use crate::foundation::store::Store;

/// One symbol: as the linker sees it and as C++ reads it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct Symbol {
    /// The mangled name.
    pub mangled: String,
    /// The demangled declaration (the mangled name where it cannot be demangled).
    pub demangled: String,
}

/// A symbol of the environment's PyTorch with the same name as the missing one.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct Candidate {
    /// The library that defines it (`libtorch_cpu.so`).
    pub library: String,
    /// The symbol.
    pub symbol: Symbol,
}

/// What the extension was built against, from its build record.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub struct BuiltWith {
    /// The build key.
    pub key: String,
    /// The recipe.
    pub recipe: String,
    /// The PyTorch ABI identity the key covered.
    pub torch: Value,
}

/// The answer.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub struct Diagnosis {
    /// The module's name.
    pub module: String,
    /// The file looked at.
    pub file: String,
    /// The interpreter it was imported in.
    pub interpreter: String,
    /// Whether it imports.
    pub imports: bool,
    /// The loader's message.
    pub message: Option<String>,
    /// The undefined symbol the loader named.
    pub undefined: Option<Symbol>,
    /// Symbols of this PyTorch with that name and another signature.
    pub candidates: Vec<Candidate>,
    /// What the extension was built against, when repro built it.
    pub built_with: Option<BuiltWith>,
    /// This environment's PyTorch ABI identity.
    pub environment: Value,
    /// What differs, in words.
    pub differences: Vec<String>,
    /// What to do.
    pub remedy: Option<String>,
}

/// The module name of an extension file: `ext.cpython-311-x86_64-linux-gnu.so` → `ext`.
pub fn module_of(file: &Path) -> Option<String> {
    let name = file.file_name()?.to_str()?;
    let module = name.split('.').next()?;
    (!module.is_empty() && name.ends_with(".so")).then(|| module.to_string())
}

/// Imports `file` in `env` and, if it fails, explains why.
pub fn diagnose(env: &PyEnv, file: &Path, store: Option<&Store>) -> std::io::Result<Diagnosis> {
    let bytes = std::fs::read(file)?;
    let module = module_of(file).unwrap_or_else(|| "extension".into());
    let name = file.file_name().map_or_else(
        || format!("{module}.so"),
        |n| n.to_string_lossy().into_owned(),
    );
    let environment = torch::identity(env);
    let mut d = Diagnosis {
        module: module.clone(),
        file: file.display().to_string(),
        interpreter: env.located.interpreter.display().to_string(),
        imports: false,
        message: None,
        undefined: None,
        candidates: Vec::new(),
        built_with: store.and_then(|s| built_with(s, &bytes)),
        environment,
        differences: Vec::new(),
        remedy: None,
    };
    match torch::import_check(env, &module, &name, &bytes, &[]) {
        Ok(_) => {
            d.imports = true;
            return Ok(d);
        }
        Err(CompileError::Import { message, .. }) => d.message = Some(message),
        Err(e) => d.message = Some(e.to_string()),
    }
    let message = d.message.clone().unwrap_or_default();
    if let Some(sym) = undefined_symbol(&message) {
        d.undefined = Some(symbol(&sym));
        if let Some(t) = &env.torch {
            d.candidates = same_name(&t.dir.join("lib"), &sym);
        }
    }
    d.differences = differences(&d, env, &name);
    d.remedy = Some(match &d.built_with {
        Some(b) => format!(
            "`repro build {} --python {}` rebuilds it for this environment",
            b.recipe, d.interpreter
        ),
        None => format!(
            "rebuild the extension against this environment's PyTorch (a `kind = \"torch-extension\"` recipe and `repro build NAME --python {}`)",
            d.interpreter
        ),
    });
    Ok(d)
}

/// The build record whose output is these bytes, if repro built them.
fn built_with(store: &Store, bytes: &[u8]) -> Option<BuiltWith> {
    let digest = crate::foundation::keys::sha256_hex(bytes);
    store
        .records(records::BUILDS)
        .into_iter()
        .filter_map(|(key, _, v)| BuildRecord::from_json(&v.ok()?, &key).ok())
        .find(|r| r.outputs.values().any(|o| o.sha256 == digest))
        .map(|r| BuiltWith {
            key: r.key.clone(),
            recipe: r.recipe.clone(),
            torch: r.inputs.torch.clone().unwrap_or(Value::Null),
        })
}

/// `undefined symbol: NAME` in a loader message.
pub fn undefined_symbol(message: &str) -> Option<String> {
    let at = message.find("undefined symbol: ")? + "undefined symbol: ".len();
    let sym: String = message[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ',' && *c != ')')
        .collect();
    (!sym.is_empty()).then_some(sym)
}

/// A symbol with its demangled form.
pub fn symbol(mangled: &str) -> Symbol {
    // The loader may print a version suffix (`name@VERS`); it is not part of the name.
    let bare = mangled.split('@').next().unwrap_or(mangled);
    let demangled = cpp_demangle::Symbol::new(bare.as_bytes())
        .ok()
        .and_then(|s| s.demangle().ok())
        .unwrap_or_else(|| bare.to_string());
    Symbol {
        mangled: bare.to_string(),
        demangled,
    }
}

/// The qualified name of a demangled declaration, without its parameters, return type and
/// qualifiers: `at::foo(at::Tensor const&)` → `at::foo`.
pub fn qualified_name(demangled: &str) -> &str {
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in demangled.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            ' ' if depth == 0 => start = i + 1,
            '(' if depth == 0 && i > start => return &demangled[start..i],
            _ => {}
        }
    }
    demangled
}

/// The last `<length><identifier>` of a mangled name: a cheap filter before demangling.
fn last_source_name(mangled: &str) -> Option<String> {
    let q = qualified_name(&symbol(mangled).demangled).to_string();
    let last = q.rsplit("::").next()?.split('<').next()?.to_string();
    (!last.is_empty()).then(|| format!("{}{last}", last.len()))
}

/// Symbols defined in PyTorch's libraries (`torch/lib/*.so*`) with the same qualified name
/// as `missing` and another signature.
pub fn same_name(lib: &Path, missing: &str) -> Vec<Candidate> {
    let want = symbol(missing);
    let want_name = qualified_name(&want.demangled).to_string();
    let Some(filter) = last_source_name(missing) else {
        return Vec::new();
    };
    let mut libs: Vec<PathBuf> = std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("lib") && n.contains(".so"))
        })
        .collect();
    libs.sort();
    let mut out = Vec::new();
    for path in libs {
        let Ok(syms) = crate::foundation::solib::dynamic_symbols(&path) else {
            continue;
        };
        let library = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for s in syms.defined.iter().filter(|s| s.contains(&filter)) {
            let sym = symbol(s);
            if sym.mangled != want.mangled && qualified_name(&sym.demangled) == want_name {
                out.push(Candidate {
                    library: library.clone(),
                    symbol: sym,
                });
            }
        }
    }
    out.dedup();
    out
}

/// What differs between what the extension was built for and this environment, in words.
fn differences(d: &Diagnosis, env: &PyEnv, file_name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let now = &d.environment;
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        other => other.to_string(),
    };
    if let Some(b) = &d.built_with {
        for (key, what) in [
            ("version", "PyTorch"),
            ("cuda", "PyTorch's CUDA"),
            ("cxx11-abi", "the C++ ABI (_GLIBCXX_USE_CXX11_ABI)"),
            ("pybind11-abi", "pybind11's ABI"),
            ("python-abi", "the Python ABI"),
        ] {
            if b.torch.get(key) != now.get(key) {
                out.push(format!(
                    "{what}: built against {} (record {}), this environment has {}",
                    text(&b.torch[key]),
                    crate::foundation::keys::short(&b.key),
                    text(&now[key])
                ));
            }
        }
    } else if let Some(t) = &env.torch
        && !d.candidates.is_empty()
    {
        out.push(format!(
            "PyTorch: built against another PyTorch than this environment's {}",
            t.version
        ));
    }
    if let (Some(u), Some(t)) = (&d.undefined, &env.torch) {
        let wants_new_abi = u.mangled.contains("cxx11");
        if let Some(abi) = t.cxx11_abi
            && wants_new_abi != abi
            && d.candidates
                .iter()
                .any(|c| c.symbol.mangled.contains("cxx11") == abi)
        {
            out.push(format!(
                "the C++ ABI: the extension was built with _GLIBCXX_USE_CXX11_ABI={}, this PyTorch uses {}",
                u8::from(wants_new_abi),
                u8::from(abi)
            ));
        }
    }
    if let Some(tag) = file_name
        .split('.')
        .find_map(|p| p.strip_prefix("cpython-"))
        .and_then(|p| p.split('-').next())
        && format!("cp{tag}") != env.abi_tag
    {
        out.push(format!(
            "the Python version: the module is for cp{tag}, this interpreter ({}) is {}",
            env.version, env.abi_tag
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_demangle_and_name_themselves() {
        let s = symbol(
            "_ZN2at25compositeimplicitautograd28scaled_dot_product_attentionERKNS_6TensorES3_S3_RKSt8optionalIS1_EdbS4_IdE",
        );
        assert_eq!(
            s.demangled,
            "at::compositeimplicitautograd::scaled_dot_product_attention(at::Tensor const&, at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, double, bool, std::optional<double>)"
        );
        assert_eq!(
            qualified_name(&s.demangled),
            "at::compositeimplicitautograd::scaled_dot_product_attention"
        );
        let cuda = symbol("_ZN3c104cuda14ExchangeDeviceEa");
        assert_eq!(cuda.demangled, "c10::cuda::ExchangeDevice(signed char)");
        assert_eq!(qualified_name(&cuda.demangled), "c10::cuda::ExchangeDevice");
        assert_eq!(
            qualified_name("std::vector<int, std::allocator<int> > at::f<int>(int)"),
            "at::f<int>"
        );
        assert_eq!(symbol("PyInit_x@@V1").demangled, "PyInit_x");
    }

    fn env_with_torch(cxx11: bool) -> PyEnv {
        use crate::foundation::pyenv::{Located, Source, Torch};
        PyEnv {
            located: Located {
                interpreter: "/v/bin/python3".into(),
                source: Source::Flag,
            },
            version: "3.11.7".into(),
            minor: (3, 11),
            abi_tag: "cp311".into(),
            ext_suffix: ".cpython-311-x86_64-linux-gnu.so".into(),
            prefix: "/v".into(),
            base_prefix: "/usr".into(),
            site_packages: vec![],
            include_dir: None,
            dists: Default::default(),
            torch: Some(Torch {
                dir: "/v/torch".into(),
                version: "2.5.1+cu124".into(),
                cuda: Some("12.4".into()),
                git_version: None,
                cxx11_abi: Some(cxx11),
                cudnn: None,
                cuda_archs: None,
            }),
        }
    }

    fn diagnosis(undefined: &str, candidate: &str, built: Option<Value>) -> Diagnosis {
        Diagnosis {
            module: "ext".into(),
            file: "ext.so".into(),
            interpreter: "/v/bin/python3".into(),
            imports: false,
            message: None,
            undefined: Some(symbol(undefined)),
            candidates: vec![Candidate {
                library: "libc10.so".into(),
                symbol: symbol(candidate),
            }],
            built_with: built.map(|torch| BuiltWith {
                key: "ab".repeat(32),
                recipe: "ext".into(),
                torch,
            }),
            environment: serde_json::json!({"version": "2.5.1+cu124", "cuda": "12.4", "cxx11-abi": false, "python-abi": "cp311"}),
            differences: vec![],
            remedy: None,
        }
    }

    #[test]
    fn differences_name_the_abi_flag_the_python_tag_and_the_versions() {
        // Built with the new C++ ABI (std::__cxx11::basic_string), PyTorch has the old one.
        let d = diagnosis(
            "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
            "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs",
            None,
        );
        let env = env_with_torch(false);
        let diffs = differences(&d, &env, "ext.cpython-310-x86_64-linux-gnu.so");
        assert!(
            diffs.iter().any(|x| x == "the C++ ABI: the extension was built with _GLIBCXX_USE_CXX11_ABI=1, this PyTorch uses 0"),
            "{diffs:?}"
        );
        assert!(
            diffs.iter().any(|x| x == "the Python version: the module is for cp310, this interpreter (3.11.7) is cp311"),
            "{diffs:?}"
        );
        assert!(
            diffs
                .iter()
                .any(|x| x.contains("another PyTorch than this environment's 2.5.1+cu124"))
        );
        // With the build record, the versions themselves.
        let d = diagnosis(
            "_ZN3c104cuda14ExchangeDeviceEa",
            "_ZN3c104cuda14ExchangeDeviceEi",
            Some(
                serde_json::json!({"version": "2.2.1+cu121", "cuda": "12.1", "cxx11-abi": false, "python-abi": "cp311"}),
            ),
        );
        let diffs = differences(&d, &env, "ext.cpython-311-x86_64-linux-gnu.so");
        assert_eq!(
            diffs[0],
            format!(
                "PyTorch: built against 2.2.1+cu121 (record {}), this environment has 2.5.1+cu124",
                "ab".repeat(6)
            )
        );
        assert_eq!(diffs.len(), 2, "{diffs:?}");
    }

    #[test]
    fn the_undefined_symbol_is_read_from_the_loader_message() {
        assert_eq!(
            undefined_symbol(
                "ImportError: /tmp/a/x.so: undefined symbol: _ZN3c104cuda14ExchangeDeviceEa"
            )
            .as_deref(),
            Some("_ZN3c104cuda14ExchangeDeviceEa")
        );
        assert_eq!(undefined_symbol("ImportError: no module"), None);
        assert_eq!(
            module_of(Path::new("/x/ext.cpython-311-x86_64-linux-gnu.so")).as_deref(),
            Some("ext")
        );
        assert_eq!(module_of(Path::new("/x/README")), None);
    }
}
