//! The Python environment's fields (`python.*`), from its files (see
//! [`crate::foundation::pyenv`]): the interpreter and how it was chosen, its version and
//! ABI tag, PyTorch's identity, NumPy, Triton, and every installed distribution as
//! `python.dist.NAME` with a digest of them all. No interpreter is started.

use std::path::Path;

use crate::foundation::fields::{DIST_PREFIX, Field, Fields};
use crate::foundation::pyenv::{self, PyEnv};

/// Describes the environment `--python` (`flag`), else repro.toml (`config`), else the
/// active one chooses.
pub fn probe(flag: Option<&Path>, config: Option<&Path>) -> Fields {
    let var = |k: &str| std::env::var_os(k);
    match pyenv::locate(flag, config, &var).and_then(pyenv::describe) {
        Ok(env) => fields_of(&env),
        Err(e) => [("python".to_string(), Field::Unavailable(e.to_string()))]
            .into_iter()
            .collect(),
    }
}

/// The fields of a described environment.
pub fn fields_of(env: &PyEnv) -> Fields {
    let mut f = Fields::new();
    let mut put = |k: &str, v: Field| {
        f.insert(k.to_string(), v);
    };
    let val = |s: &str| Field::Value(s.to_string());
    put(
        "python.interpreter",
        val(&env.located.interpreter.display().to_string()),
    );
    put("python.found-by", val(env.located.source.describe()));
    put("python.version", val(&env.version));
    put("python.abi-tag", val(&env.abi_tag));
    put("python.prefix", val(&env.prefix.display().to_string()));
    put("python.distributions", val(&env.dists.len().to_string()));
    put("python.distributions-digest", val(&env.dists_digest()));
    for (name, version) in &env.dists {
        put(&format!("{DIST_PREFIX}{name}"), val(version));
    }
    let missing = |what: &str| {
        Field::Unavailable(format!(
            "{what} is not installed in {}",
            env.prefix.display()
        ))
    };
    for (key, dist) in [
        ("python.numpy.version", "numpy"),
        ("python.triton.version", "triton"),
    ] {
        let v = env
            .dists
            .get(dist)
            .map_or_else(|| missing(dist), |v| val(v));
        put(key, v);
    }
    let Some(t) = &env.torch else {
        put("python.torch", missing("torch"));
        return f;
    };
    let or = |v: Option<&str>, why: &str| v.map_or_else(|| Field::Unavailable(why.into()), val);
    put("python.torch.version", val(&t.version));
    put(
        "python.torch.cuda",
        or(t.cuda.as_deref(), "a CPU-only build of PyTorch"),
    );
    put(
        "python.torch.cudnn",
        or(t.cudnn.as_deref(), "no cuDNN found with this PyTorch"),
    );
    put(
        "python.torch.cxx11-abi",
        or(
            t.cxx11_abi.map(|b| if b { "true" } else { "false" }),
            "torch/share/cmake/Torch/TorchConfig.cmake does not say",
        ),
    );
    let archs = t.cuda_archs.as_ref().map(|a| a.join(" "));
    put(
        "python.torch.cuda-archs",
        or(
            archs.as_deref(),
            "no device code in torch/lib/libtorch_cuda.so",
        ),
    );
    put(
        "python.torch.git-version",
        or(
            t.git_version.as_deref(),
            "torch/version.py has no git_version",
        ),
    );
    f
}
