//! The compiler options a recipe may pass to nvcc or NVRTC: an allow-list.
//!
//! A recipe travels in bundles and repositories from other people, and an nvcc recipe
//! runs nvcc, which runs whatever host compiler `-ccbin` names, with whatever `-Xcompiler`
//! adds. So `options` is not a free-form command line: every flag must be one that only
//! tunes code generation, diagnostics or the language dialect, and every value it takes is
//! checked (a number, a level, a known word). Flags that choose programs, directories,
//! input or output files (`-ccbin`, `-Xcompiler`, `-Xlinker`, `-odir`, `-include`, `-I`,
//! `--keep-dir`, `--options-file`, `@file`, ...) and flags repro sets itself (`-arch`,
//! `-gencode`, `-o`, `-cubin`, `-D`) are refused. Whoever needs them writes a
//! `kind = "command"` recipe, which replays from a bundle only with `--allow-commands`.

/// What a flag's value must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    /// The flag takes no value.
    None,
    /// `true` or `false`.
    Bool,
    /// A decimal number (at most six digits).
    Number,
    /// An optimisation level, `0` to `3`.
    Level,
    /// One of the listed words.
    Word(&'static [&'static str]),
    /// A comma-separated list of diagnostic numbers or names (letters, digits, `-`, `_`).
    Diagnostics,
    /// A comma-separated list of ptxas options, each itself on [`PTXAS`].
    Ptxas,
}

/// One accepted flag: its spellings, its value, and which compilers take it.
struct Flag {
    names: &'static [&'static str],
    val: Val,
    nvcc: bool,
    nvrtc: bool,
}

const STDS: &[&str] = &["c++03", "c++11", "c++14", "c++17", "c++20"];
const BOTH: (bool, bool) = (true, true);
const NVCC: (bool, bool) = (true, false);

const fn flag(names: &'static [&'static str], val: Val, (nvcc, nvrtc): (bool, bool)) -> Flag {
    Flag {
        names,
        val,
        nvcc,
        nvrtc,
    }
}

/// The flags a recipe may pass. Everything not here is refused.
const FLAGS: &[Flag] = &[
    flag(&["-O0", "-O1", "-O2", "-O3"], Val::None, NVCC),
    flag(&["--optimize", "-O"], Val::Level, NVCC),
    flag(&["--dopt", "-dopt"], Val::Word(&["on", "off"]), BOTH),
    flag(&["-G", "--device-debug"], Val::None, BOTH),
    flag(&["-g", "--debug"], Val::None, NVCC),
    flag(&["-lineinfo", "--generate-line-info"], Val::None, BOTH),
    flag(&["--use_fast_math", "-use_fast_math"], Val::None, BOTH),
    flag(&["--ftz", "-ftz"], Val::Bool, BOTH),
    flag(&["--prec-div", "-prec-div"], Val::Bool, BOTH),
    flag(&["--prec-sqrt", "-prec-sqrt"], Val::Bool, BOTH),
    flag(&["--fmad", "-fmad"], Val::Bool, BOTH),
    flag(
        &[
            "--extra-device-vectorization",
            "-extra-device-vectorization",
        ],
        Val::None,
        BOTH,
    ),
    flag(&["--std", "-std"], Val::Word(STDS), BOTH),
    flag(&["--maxrregcount", "-maxrregcount"], Val::Number, BOTH),
    flag(&["--relocatable-device-code", "-rdc"], Val::Bool, BOTH),
    flag(
        &["--expt-relaxed-constexpr", "-expt-relaxed-constexpr"],
        Val::None,
        BOTH,
    ),
    flag(
        &[
            "--extended-lambda",
            "-extended-lambda",
            "--expt-extended-lambda",
            "-expt-extended-lambda",
        ],
        Val::None,
        BOTH,
    ),
    flag(
        &["--device-as-default-execution-space", "-default-device"],
        Val::None,
        (false, true),
    ),
    flag(&["--restrict", "-restrict"], Val::None, BOTH),
    flag(&["--disable-warnings", "-w"], Val::None, BOTH),
    flag(&["--Wreorder", "-Wreorder"], Val::None, BOTH),
    flag(
        &[
            "--Wno-deprecated-declarations",
            "-Wno-deprecated-declarations",
        ],
        Val::None,
        BOTH,
    ),
    flag(
        &[
            "--Wno-deprecated-gpu-targets",
            "-Wno-deprecated-gpu-targets",
        ],
        Val::None,
        NVCC,
    ),
    flag(
        &["--Wext-lambda-captures-this", "-Wext-lambda-captures-this"],
        Val::None,
        NVCC,
    ),
    flag(
        &["--Wdefault-stream-launch", "-Wdefault-stream-launch"],
        Val::None,
        NVCC,
    ),
    flag(
        &["--Wmissing-launch-bounds", "-Wmissing-launch-bounds"],
        Val::None,
        NVCC,
    ),
    flag(&["--Werror", "-Werror"], Val::Diagnostics, NVCC),
    flag(
        &["--diag-suppress", "-diag-suppress"],
        Val::Diagnostics,
        BOTH,
    ),
    flag(&["--diag-error", "-diag-error"], Val::Diagnostics, BOTH),
    flag(&["--diag-warn", "-diag-warn"], Val::Diagnostics, BOTH),
    flag(&["--display-error-number", "-err-no"], Val::None, BOTH),
    flag(
        &["--no-display-error-number", "-no-err-no"],
        Val::None,
        BOTH,
    ),
    flag(&["--resource-usage", "-res-usage"], Val::None, NVCC),
    flag(&["--source-in-ptx", "-src-in-ptx"], Val::None, NVCC),
    flag(
        &["--default-stream", "-default-stream"],
        Val::Word(&["legacy", "null", "per-thread"]),
        NVCC,
    ),
    flag(&["--threads", "-t"], Val::Number, NVCC),
    flag(&["--ptxas-options", "-Xptxas"], Val::Ptxas, BOTH),
    flag(
        &["--builtin-move-forward", "-builtin-move-forward"],
        Val::Bool,
        (false, true),
    ),
    flag(
        &["--builtin-initializer-list", "-builtin-initializer-list"],
        Val::Bool,
        (false, true),
    ),
];

/// The ptxas options `-Xptxas` may carry (each value checked as above).
const PTXAS: &[(&[&str], Val)] = &[
    (&["-v", "--verbose"], Val::None),
    (&["-O0", "-O1", "-O2", "-O3"], Val::None),
    (&["--opt-level", "-O"], Val::Level),
    (&["--warn-on-spills", "-warn-spills"], Val::None),
    (
        &["--warn-on-local-memory-usage", "-warn-lmem-usage"],
        Val::None,
    ),
    (
        &["--warn-on-double-precision-use", "-warn-double-usage"],
        Val::None,
    ),
    (&["--warning-as-error", "-Werror"], Val::None),
    (
        &["--def-load-cache", "-dlcm"],
        Val::Word(&["ca", "cg", "cs", "lu", "cv"]),
    ),
    (
        &["--def-store-cache", "-dscm"],
        Val::Word(&["wb", "cg", "cs", "wt"]),
    ),
    (
        &[
            "--allow-expensive-optimizations",
            "-allow-expensive-optimizations",
        ],
        Val::Bool,
    ),
    (&["--maxrregcount", "-maxrregcount"], Val::Number),
    (&["--generate-line-info", "-lineinfo"], Val::None),
    (&["--device-debug", "-g"], Val::None),
    (&["--sp-bounds-check", "-sp-bounds-check"], Val::None),
    (
        &[
            "--suppress-stack-size-warning",
            "-suppress-stack-size-warning",
        ],
        Val::None,
    ),
    (
        &["--disable-optimizer-constants", "-disable-optimizer-consts"],
        Val::None,
    ),
    (&["--fmad", "-fmad"], Val::Bool),
];

/// Options set by another key of the recipe, with that key: refused with a pointer to it.
const SET_BY_KEY: &[(&str, &str)] = &[
    ("-arch", "target"),
    ("--gpu-architecture", "target"),
    ("-gencode", "target"),
    ("--generate-code", "target"),
    ("-code", "target"),
    ("--gpu-code", "target"),
    ("-o", "outputs"),
    ("--output-file", "outputs"),
    ("-ptx", "outputs"),
    ("--ptx", "outputs"),
    ("-cubin", "outputs"),
    ("--cubin", "outputs"),
    ("-fatbin", "outputs"),
    ("--fatbin", "outputs"),
    ("-I", "include-dirs"),
    ("--include-path", "include-dirs"),
    ("-D", "[build.defines]"),
    ("--define-macro", "[build.defines]"),
];

/// Which compiler the options are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compiler {
    /// nvcc, run as a child process.
    Nvcc,
    /// NVRTC, in process.
    Nvrtc,
}

impl Compiler {
    /// The compiler's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Compiler::Nvcc => "nvcc",
            Compiler::Nvrtc => "NVRTC",
        }
    }
}

/// Why one option was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The index in `options` of the element refused.
    pub index: usize,
    /// The element as written.
    pub option: String,
    /// What is wrong with it, for the message.
    pub message: String,
    /// What to do instead.
    pub hint: String,
}

/// The hint for an option that is not on the list.
const NOT_LISTED_HINT: &str = "options that name programs, directories or files (a host compiler, \
     -Xcompiler, -Xlinker, an include or output location) are refused so that a recipe from \
     elsewhere cannot run anything; to build with such flags, write a `kind = \"command\"` \
     recipe, which a bundle replays only with --allow-commands";

/// Checks every element of `options` against the allow-list for `compiler`.
pub fn check(compiler: Compiler, options: &[String]) -> Result<(), Refusal> {
    let mut i = 0;
    while i < options.len() {
        i += check_one(compiler, options, i)?;
    }
    Ok(())
}

/// Checks the option at `i` (and its value, when that is the next element); returns how
/// many elements it used.
fn check_one(compiler: Compiler, options: &[String], i: usize) -> Result<usize, Refusal> {
    let opt = options[i].as_str();
    let refuse = |message: String, hint: String| Refusal {
        index: i,
        option: opt.to_string(),
        message,
        hint,
    };
    if let Some((flag, key)) = set_by_key(opt) {
        return Err(refuse(
            format!("`{opt}` is set by the recipe's `{key}`"),
            format!(
                "use `{key}` instead, so repro can hash it and keep paths relative (`{flag}` is never passed through `options`)"
            ),
        ));
    }
    let (name, glued) = match opt.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (opt, None),
    };
    let found = FLAGS.iter().find(|f| {
        f.names.contains(&name)
            && match compiler {
                Compiler::Nvcc => f.nvcc,
                Compiler::Nvrtc => f.nvrtc,
            }
    });
    let Some(f) = found else {
        return Err(refuse(
            format!(
                "`{}` is not an option a recipe may pass to {}",
                crate::foundation::output::sanitize(name),
                compiler.name()
            ),
            NOT_LISTED_HINT.into(),
        ));
    };
    let (value, used) = match (f.val, glued) {
        (Val::None, None) => return Ok(1),
        (Val::None, Some(_)) => {
            return Err(refuse(
                format!("`{name}` takes no value"),
                format!("write `{name}` alone"),
            ));
        }
        (_, Some(v)) => (v, 1),
        (_, None) => match options.get(i + 1) {
            Some(v) => (v.as_str(), 2),
            None => {
                return Err(refuse(
                    format!("`{name}` needs a value"),
                    format!("write `{name}=VALUE`"),
                ));
            }
        },
    };
    check_value(f.val, value).map_err(|why| {
        refuse(
            format!(
                "`{name}`: the value `{}` is not accepted ({})",
                crate::foundation::output::sanitize(value),
                why.0
            ),
            NOT_LISTED_HINT.into(),
        )
    })?;
    Ok(used)
}

/// The option `opt` spells when it is one another recipe key sets, with that key.
fn set_by_key(opt: &str) -> Option<(&'static str, &'static str)> {
    SET_BY_KEY.iter().copied().find(|(p, _)| {
        opt == *p
            || opt.starts_with(&format!("{p}="))
            // `-Ifoo`, `-DX=1`: these two glue their value.
            || (matches!(*p, "-I" | "-D") && opt.starts_with(p))
    })
}

/// What was expected of a value, for the message.
struct Why(String);

/// Checks `value` against `val`; `Err` says what was expected.
fn check_value(val: Val, value: &str) -> Result<(), Why> {
    let ok = match val {
        Val::None => value.is_empty(),
        Val::Bool => matches!(value, "true" | "false"),
        Val::Number => {
            !value.is_empty() && value.len() <= 6 && value.bytes().all(|b| b.is_ascii_digit())
        }
        Val::Level => matches!(value, "0" | "1" | "2" | "3"),
        Val::Word(words) => words.contains(&value),
        Val::Diagnostics => {
            !value.is_empty()
                && value.split(',').all(|d| {
                    !d.is_empty()
                        && d.len() <= 64
                        && d.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                        && !d.starts_with('-')
                })
        }
        Val::Ptxas => {
            return value.split(',').try_for_each(check_ptxas);
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Why(match val {
            Val::Bool => "true or false".into(),
            Val::Number => "a number".into(),
            Val::Level => "0, 1, 2 or 3".into(),
            Val::Word(w) => format!("one of {}", w.join(", ")),
            Val::Diagnostics => "diagnostic numbers or names, separated by commas".into(),
            Val::None | Val::Ptxas => "no value".into(),
        }))
    }
}

/// Checks one ptxas option carried by `-Xptxas`.
fn check_ptxas(opt: &str) -> Result<(), Why> {
    let (name, value) = match opt.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (opt, None),
    };
    let Some((_, val)) = PTXAS.iter().find(|(names, _)| names.contains(&name)) else {
        return Err(Why(format!(
            "`{}` is not a ptxas option a recipe may pass",
            crate::foundation::output::sanitize(name)
        )));
    };
    match (val, value) {
        (Val::None, None) => Ok(()),
        (Val::None, Some(_)) => Err(Why(format!("ptxas `{name}` takes no value"))),
        (_, None) => Err(Why(format!("ptxas `{name}` needs `=VALUE`"))),
        (v, Some(value)) => {
            check_value(*v, value).map_err(|e| Why(format!("ptxas `{name}`: {}", e.0)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvcc(opts: &[&str]) -> Result<(), Refusal> {
        check(
            Compiler::Nvcc,
            &opts.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    }
    fn nvrtc(opts: &[&str]) -> Result<(), Refusal> {
        check(
            Compiler::Nvrtc,
            &opts.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn tuning_options_pass() {
        for ok in [
            &["-O3"][..],
            &["-lineinfo", "--use_fast_math", "-std=c++17", "--std=c++20"],
            &["-maxrregcount=64", "--maxrregcount", "128"],
            &["--expt-relaxed-constexpr", "--extended-lambda", "-rdc=true"],
            &["-Xptxas", "-v"],
            &[
                "-Xptxas=-v,-O3,-dlcm=ca",
                "--ptxas-options=--warn-on-spills",
            ],
            &[
                "-Xptxas",
                "--maxrregcount=32,-allow-expensive-optimizations=true",
            ],
            &["--diag-suppress=177,550", "-Werror=all-warnings", "-w"],
            &[
                "--ftz=true",
                "--prec-div=false",
                "-fmad=false",
                "--threads=4",
            ],
            &[
                "--default-stream",
                "per-thread",
                "-G",
                "-g",
                "--resource-usage",
            ],
        ] {
            assert_eq!(nvcc(ok), Ok(()), "{ok:?}");
        }
        for ok in [
            &["--std=c++17"][..],
            &["-lineinfo", "--use_fast_math", "-default-device"],
            &[
                "--maxrregcount=64",
                "-Xptxas=-v",
                "--builtin-move-forward=false",
            ],
        ] {
            assert_eq!(nvrtc(ok), Ok(()), "{ok:?}");
        }
    }

    /// Every spelling of a flag that names a program, a directory or a file, alone, glued,
    /// split or hidden inside a value: each is refused, naming the element that was.
    #[test]
    fn flags_that_name_programs_directories_or_files_are_refused() {
        let nvcc_cases: &[&[&str]] = &[
            &["-ccbin", "./evil.sh"],
            &["-ccbin=./evil.sh"],
            &["-ccbin./evil.sh"],
            &["--compiler-bindir", "/tmp/x"],
            &["--compiler-bindir=/tmp/x"],
            &["-Xcompiler", "-B/x"],
            &["-Xcompiler=-B/x"],
            &["-Xcompiler", "-fplugin=/x.so"],
            &["--compiler-options", "-B/x"],
            &["--compiler-options=-B/x"],
            &["-Xlinker", "-rpath=/x"],
            &["--linker-options=/x"],
            &["-Xnvlink", "-x"],
            &["--nvlink-options=x"],
            &["-Xarchive", "x"],
            &["--archive-options=x"],
            &["-odir", "/tmp"],
            &["--output-directory=/tmp"],
            &["-include", "/etc/passwd"],
            &["--pre-include=/x.h"],
            &["-isystem", "/usr/include"],
            &["--system-include=/x"],
            &["-I/abs"],
            &["--include-path=/x"],
            &["-L/x"],
            &["--library-path=/x"],
            &["-l", "evil"],
            &["--library=evil"],
            &["--keep"],
            &["-keep"],
            &["--keep-dir", "/tmp"],
            &["-keep-dir=/tmp"],
            &["--save-temps"],
            &["--dryrun"],
            &["-dryrun"],
            &["--run"],
            &["--run-args", "x"],
            &["--options-file", "opts.txt"],
            &["-optf", "opts.txt"],
            &["@opts.txt"],
            &["-MF", "/tmp/deps"],
            &["--dependency-output=/tmp/d"],
            &["-M"],
            &["-E"],
            &["--use-local-env"],
            &["--target-directory=x"],
            &["-B", "/x"],
            &["-gencode", "arch=compute_90,code=sm_90"],
            &["-gencode=arch=compute_90,code=sm_90"],
            &["--generate-code=arch=compute_90"],
            &["-arch=sm_80"],
            &["-code=sm_90"],
            &["-o", "x"],
            &["-cubin"],
            &["-DX=1"],
            &["evil.cu"],
            &["./evil.sh"],
            &["-Xptxas", "-o,/tmp/x"],
            &["-Xptxas=--output-file=/tmp/x"],
            &["-Xptxas", "-v", "-Xcompiler", "-B/x"],
            &["-O3 -ccbin ./evil.sh"],
            &["-std=c++17 -ccbin=./evil.sh"],
            &["--std", "-ccbin"],
            &["-maxrregcount=32;touch"],
            &["--diag-suppress=-B/x"],
            &["-lineinfo=/x"],
            &["-maxrregcount"],
        ];
        for case in nvcc_cases {
            let err = nvcc(case).expect_err(&format!("{case:?} was accepted"));
            assert!(!err.message.is_empty() && !err.hint.is_empty(), "{case:?}");
        }
        let nvrtc_cases: &[&[&str]] = &[
            &["-I/abs"],
            &["--include-path=x"],
            &["--pre-include=/x.h"],
            &["-include", "/x.h"],
            &["--pch"],
            &["--create-pch=/tmp/x.pch"],
            &["--use-pch=/tmp/x.pch"],
            &["--pch-dir=/tmp"],
            &["--time=/tmp/t.csv"],
            &["--fdevice-time-trace=/tmp/t.json"],
            &["-ccbin=x"],
            &["-O3"],
        ];
        for case in nvrtc_cases {
            assert!(nvrtc(case).is_err(), "{case:?} was accepted by NVRTC");
        }
    }

    #[test]
    fn the_refusal_names_the_element_and_points_to_a_command_recipe() {
        let err = nvcc(&["-O3", "-Xcompiler", "-B/x"]).unwrap_err();
        assert_eq!(err.index, 1);
        assert_eq!(err.option, "-Xcompiler");
        assert!(
            err.message
                .contains("`-Xcompiler` is not an option a recipe may pass to nvcc")
        );
        assert!(err.hint.contains("kind = \"command\""), "{}", err.hint);
        assert!(err.hint.contains("--allow-commands"), "{}", err.hint);
        let err = nvcc(&["-Xptxas", "-v,-o=/x"]).unwrap_err();
        assert_eq!(err.index, 0);
        assert!(
            err.message.contains("`-o` is not a ptxas option"),
            "{}",
            err.message
        );
        let err = nvcc(&["-Ifoo"]).unwrap_err();
        assert!(err.message.contains("`include-dirs`"), "{}", err.message);
    }
}
