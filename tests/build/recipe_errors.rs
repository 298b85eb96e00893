//! Every mistake in a recipe's [params], [run] and [check] sections is a usage error (exit 2)
//! that names the recipe file, the line and column, and what is wrong, with a hint where
//! there is a remedy; `repro build` reports it before any compiler is looked for, so these
//! run without NVRTC.

use crate::common;

use common::{repo_with, repro};

const BUILD: &str = "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\", \"ref\"]\ntarget = \"sm_90\"\noutputs = [\"ptx\"]\n";

const RUN: &str = "[run]\nkernel = \"k\"\ngrid = \"n\"\nblock = 256\nargs = [\n  { name = \"a\", buffer = \"f32\", count = \"n\", init = \"iota\" },\n  { name = \"c\", buffer = \"f32\", count = \"n\", output = true },\n]\n";

#[test]
fn every_run_section_mistake_is_named_where_it_is() {
    let params = "[params]\nn = [1, 2]\n";
    let arg = |a: &str| {
        format!("{params}[run]\nkernel = \"k\"\ngrid = 1\nblock = 1\nargs = [\n  {a},\n]\n")
    };
    // (sections after [build], the line:column the error points at, the message, the hint)
    let cases: Vec<(String, &str, &str, Option<&str>)> = vec![
        (
            "[params]\nn = [\"big\"]\n".into(),
            "9:5",
            "[params] `n` must be a number or a list of numbers",
            None,
        ),
        (
            "[params]\nn = []\n".into(),
            "9:5",
            "[params] `n` has no values",
            None,
        ),
        (
            format!("{params}[run]\nkernel = \"k\"\ngrid = [1, 2, 3, 4]\nblock = 1\nargs = []\n"),
            "12:8",
            "`[run] grid` takes one to three dimensions",
            None,
        ),
        (
            format!("{params}[run]\nkernel = \"k\"\ngrid = {{ x = 1 }}\nblock = 1\nargs = []\n"),
            "12:8",
            "`[run] grid` must be an expression (a string or a number), not table",
            Some("for example \"ceil_div(n, 256)\" or 128"),
        ),
        (
            format!("{params}[run]\nkernel = \"k\"\ngrid = true\nblock = 1\nargs = []\n"),
            "12:8",
            "`[run] grid` must be an expression (a string or a number), not boolean",
            Some("for example \"ceil_div(n, 256)\" or 128"),
        ),
        (
            format!("{params}[run]\nkernel = \"k\"\ngrid = \"m * 2\"\nblock = 1\nargs = []\n"),
            "12:8",
            "`[run] grid` uses `m`, which is not a parameter",
            Some("parameters are: n"),
        ),
        (
            "[run]\nkernel = \"k\"\ngrid = \"n\"\nblock = 1\nargs = []\n".into(),
            "10:8",
            "`[run] grid` uses `n`, which is not a parameter",
            Some("declare it under [params]"),
        ),
        (
            format!(
                "{params}[run]\nkernel = \"k\"\ngrid = 1\nblock = 1\nargs = [\n  {{ name = \"a\", scalar = \"i32\", value = \"n\" }},\n  {{ name = \"a\", scalar = \"i32\", value = \"n\" }},\n]\n"
            ),
            "16:12",
            "[run] args: `a` is used twice",
            None,
        ),
        (
            arg("{ name = \"a\", buffer = \"f99\", count = \"n\" }"),
            "15:26",
            "[run] args[0] (a) `buffer`: unknown type `f99`",
            Some("types: f16, bf16, f32"),
        ),
        (
            arg("{ name = \"a\", buffer = \"f32\" }"),
            "15:3",
            "[run] args[0] (a) `count` is missing",
            None,
        ),
        (
            arg("{ name = \"a\", buffer = \"f32\", count = \"n\", value = \"1\" }"),
            "15:3",
            "[run] args[0] (a) `value`: a buffer takes `count`, not `value`",
            None,
        ),
        (
            arg(
                "{ name = \"a\", buffer = \"f32\", count = \"n\", init = \"uniform\", low = 2.0, high = 1.0 }",
            ),
            "15:3",
            "[run] args[0] (a) `init`: `low` 2 must not exceed `high` 1, and both must be finite",
            None,
        ),
        (
            arg("{ name = \"a\", buffer = \"f32\", count = \"n\", init = \"normal\", std = -1.0 }"),
            "15:3",
            "[run] args[0] (a) `init`: `std` -1 must be finite and not negative, `mean` 0 finite",
            None,
        ),
        (
            arg("{ name = \"s\", scalar = \"q8\", value = \"n\" }"),
            "15:26",
            "[run] args[0] (s) `scalar`: unknown type `q8`",
            None,
        ),
        (
            arg("{ name = \"s\", scalar = \"f16\", value = \"n\" }"),
            "15:26",
            "[run] args[0] (s) `scalar`: half-precision scalars are not supported",
            Some("pass f32 and convert in the kernel"),
        ),
        (
            arg("{ name = \"s\", scalar = \"i32\" }"),
            "15:3",
            "[run] args[0] (s) `value` is missing",
            None,
        ),
        (
            arg("{ name = \"s\", scalar = \"i32\", value = \"n\", count = \"n\" }"),
            "15:3",
            "[run] args[0] (s): a scalar takes only `value`",
            None,
        ),
        (
            "[params]\n\"a b\" = 4\n".into(),
            "9:9",
            "[params] `a b` is not a name an expression can use",
            Some(
                "name a parameter with letters, digits and `_`, not starting with a digit (`seq_len`)",
            ),
        ),
        (
            "[params]\n\"\" = 4\n".into(),
            "9:6",
            "[params] `` is not a name an expression can use",
            Some("name a parameter with letters"),
        ),
        (
            arg(
                "{ name = \"a\", buffer = \"u8\", count = \"n\", init = \"constant\", mean = 300.0 }",
            ),
            "15:3",
            "[run] args[0] (a) `mean`: 300 does not fit a u8 element",
            None,
        ),
        (
            arg(
                "{ name = \"a\", buffer = \"i32\", count = \"n\", init = \"uniform\", low = -1.0, high = 3e10 }",
            ),
            "15:3",
            "[run] args[0] (a) `high`: 30000000000 does not fit a i32 element",
            None,
        ),
        (
            arg(
                "{ name = \"a\", buffer = \"f16\", count = \"n\", init = \"constant\", mean = 1e6 }",
            ),
            "15:3",
            "[run] args[0] (a) `mean`: 1000000 does not fit a f16 element",
            None,
        ),
        (
            arg("{ name = \"a\", buffer = \"f32\", count = \"n\", init = \"normal\", low = 5.0 }"),
            "15:3",
            "[run] args[0] (a) `low`: init `normal` takes no `low`",
            Some("inits: zeros, constant (with mean = VALUE)"),
        ),
        (
            arg(
                "{ name = \"a\", buffer = \"f32\", count = \"n\", init = \"constant\", low = 5.0 }",
            ),
            "15:3",
            "[run] args[0] (a) `low`: init `constant` takes no `low`",
            Some("inits: zeros, constant (with mean = VALUE)"),
        ),
        (
            arg("{ name = \"a\", buffer = \"f32\", count = \"n\", output = true, mean = 1.0 }"),
            "15:3",
            "[run] args[0] (a) `mean`: `mean` goes with an `init`, and there is none",
            Some("inits: zeros"),
        ),
        (
            arg("{ name = \"s\", scalar = \"f32\", value = \"n\", std = 2.0 }"),
            "15:3",
            "[run] args[0] (s): a scalar takes only `value`",
            None,
        ),
        (
            format!("{params}[check]\nkernel = \"ref\"\n"),
            "10:1",
            "[check] needs a [run] section",
            None,
        ),
        (
            format!(
                "{params}[run]\nkernel = \"k\"\ngrid = 1\nblock = 1\nargs = [{{ name = \"a\", buffer = \"f32\", count = \"n\", init = \"zeros\" }}]\n[check]\nkernel = \"ref\"\n"
            ),
            "15:1",
            "[check] has nothing to compare: no argument is `output = true`",
            None,
        ),
        (
            format!(
                "{params}{RUN}[check]\nkernel = \"ref\"\n[check.tolerance]\na = {{ atol = 0.1 }}\n"
            ),
            "21:1",
            "[check] tolerance: `a` is not an output",
            Some("outputs: c"),
        ),
    ];
    let (tmp, root) = repo_with(&[("k.cu", "// a kernel\n")]);
    for (sections, at, message, hint) in cases {
        let text = format!("{BUILD}{sections}");
        std::fs::create_dir_all(root.join("recipes")).unwrap();
        std::fs::write(root.join("recipes/bad.toml"), &text).unwrap();
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["build", "bad"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{message}\n{text}\n{err}");
        let first = err.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!("error: recipes/bad.toml:{at}: {message}"),
            "\n{text}"
        );
        match hint {
            Some(h) => assert!(err.contains(&format!("hint: {h}")), "{message}: {err}"),
            None => assert!(!err.contains("hint:"), "{message}: {err}"),
        }
    }
}

#[test]
fn every_repro_toml_mistake_is_named_where_it_is() {
    let wheel =
        "{ package = \"nvidia-cuda-nvcc\", version = \"13.0.88\", sha256 = { x86_64 = \"00\" } }";
    // (repro.toml, line:column, message)
    let cases = [
        ("schema = 2\n".to_string(), "1:1", "written by a newer repro (schema 2; this repro reads 1)".to_string()),
        (
            format!("schema = 1\n[toolchain.nvcc.\"13.x\"]\nwheels = [{wheel}]\n"),
            "2:12",
            "[toolchain.nvcc] release `13.x` must be digits and dots, e.g. \"13.0\"".to_string(),
        ),
        (
            "schema = 1\n[toolchain.nvcc.\"13.0\"]\nwheels = []\n".to_string(),
            "2:12",
            "[toolchain.nvcc.\"13.0\"] `wheels` is empty".to_string(),
        ),
        (
            "schema = 1\n[toolchain.nvrtc]\nversion = \"13.0; rm -rf /\"\nsha256 = { x86_64 = \"00\" }\n".to_string(),
            "3:12",
            "[toolchain.nvrtc] `version` `13.0; rm -rf /` is not a plain version".to_string(),
        ),
    ];
    let (tmp, root) = repo_with(&[]);
    for (text, at, message) in cases {
        std::fs::write(root.join("repro.toml"), &text).unwrap();
        // Every command that reads the project's settings stops on them the same way.
        for args in [
            &["toolchain", "which"][..],
            &["env", "check"],
            &["build", "k"],
        ] {
            let out = repro(tmp.path())
                .arg("-C")
                .arg(&root)
                .args(args)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?} {text}: {err}");
            assert_eq!(
                err.lines().next().unwrap_or_default(),
                format!("error: repro.toml:{at}: {message}"),
                "{args:?}"
            );
            let hint = if message.starts_with("written by a newer repro") {
                "hint: upgrade repro"
            } else {
                "hint: repro's book documents repro.toml"
            };
            assert!(err.contains(hint), "{err}");
        }
    }
}

#[test]
fn every_build_section_mistake_is_named_with_its_remedy() {
    let nvrtc = |extra: &str| {
        format!(
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n{extra}"
        )
    };
    let command = |extra: &str| format!("schema = 1\n[build]\nkind = \"command\"\n{extra}");
    let ok_cmd = "argv = [\"true\"]\ninputs = [\"*.cu\"]\noutputs = [\"o\"]\n";
    // (recipe, the message, the hint)
    let cases: Vec<(String, &str, Option<&str>)> = vec![
        (
            nvrtc("outputs = [\"ptx\"]\n").replace("schema = 1", "schema = 9"),
            "schema",
            Some("upgrade repro to read this recipe"),
        ),
        (
            nvrtc("outputs = [\"ptx\"]\n").replace("schema = 1", "schema = \"one\""),
            "`schema` must be a positive integer, not \"one\"",
            None,
        ),
        (
            nvrtc("outputs = [\"ptx\"]\n").replace("entries = [\"k\"]", "entries = []"),
            "[build] `entries` is empty",
            Some("name the kernels, e.g. entries = [\"vector_add\"]"),
        ),
        (nvrtc("outputs = []\n"), "[build] `outputs` is empty", None),
        (
            nvrtc("outputs = [\"ptx\"]\ntoolchain = \"gcc@1\"\n"),
            "[build] `toolchain`: ",
            None,
        ),
        (
            nvrtc("outputs = [\"ptx\"]\n[build.defines]\n1X = \"2\"\n"),
            "[build.defines] `1X` is not a macro name",
            None,
        ),
        (
            nvrtc("outputs = [\"ptx\"]\n[build.defines]\nX = [1]\n"),
            "[build.defines] `X` must be a string, number, boolean or { env = \"VAR\" }",
            None,
        ),
        (
            command(
                "argv = [\"true\"]\nentries = [\"k\", \"k\"]\ninputs = [\"*.cu\"]\noutputs = [\"o\"]\n",
            ),
            "[build] `entries`: `k` is named twice",
            Some("name each kernel once"),
        ),
        (
            command("argv = []\ninputs = [\"*.cu\"]\noutputs = [\"o\"]\n"),
            "[build] `argv` is empty: kind `command` runs its first word",
            None,
        ),
        (
            command("argv = [\"true\"]\ninputs = [\"a[\"]\noutputs = [\"o\"]\n"),
            "[build] `inputs`: bad glob `a[`",
            None,
        ),
        (
            command("argv = [\"true\"]\ninputs = [\"../*.cu\"]\noutputs = [\"o\"]\n"),
            "[build] `inputs`: `../*.cu` is outside the repository",
            None,
        ),
        (
            command("argv = [\"true\"]\ninputs = [\"*.cu\"]\noutputs = []\n"),
            "[build] `outputs` is empty: kind `command` keeps the files it names",
            None,
        ),
        (
            command("argv = [\"true\"]\ninputs = [\"*.cu\"]\noutputs = [\"../o\"]\n"),
            "[build] `outputs`: `../o` is outside the repository",
            None,
        ),
        (
            command(&format!("{ok_cmd}timeout = \"soon\"\n")),
            "[build] `timeout`: `soon`: ",
            Some("for example \"90s\" or \"10m\""),
        ),
        (
            command(&format!("{ok_cmd}[bisect]\npaths = [\"/etc\"]\n")),
            "[bisect] `paths`: `/etc` is not a pathspec relative to the root",
            Some("use git pathspecs such as \"kernels/\""),
        ),
    ];
    let (tmp, root) = repo_with(&[("k.cu", "// a kernel\n")]);
    std::fs::create_dir_all(root.join("recipes")).unwrap();
    for (text, message, hint) in cases {
        std::fs::write(root.join("recipes/bad.toml"), &text).unwrap();
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["build", "bad"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{message}\n{text}\n{err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(first.starts_with("error: recipes/bad.toml"), "{first}");
        assert!(first.contains(message), "{message}\n{text}\n{err}");
        if let Some(h) = hint {
            assert!(err.contains(&format!("hint: {h}")), "{message}: {err}");
        }
    }
}

/// A `REPRO_*` limit set to something that is not a whole number is the environment's
/// mistake: it is named with its value, and no line of the recipe is blamed.
#[test]
fn a_bad_sweep_limit_is_blamed_on_the_environment_not_the_recipe() {
    let (tmp, root) = repo_with(&[
        ("k.cu", "// a kernel\n"),
        (
            "recipes/r.toml",
            &format!("{BUILD}[params]\nn = [1, 2]\n{RUN}"),
        ),
    ]);
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "r"])
        .env("REPRO_MAX_SWEEP_POINTS", "abc")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("error: REPRO_MAX_SWEEP_POINTS=\"abc\" is not a whole number\nhint: set REPRO_MAX_SWEEP_POINTS to a whole number"), "{err}");
}
