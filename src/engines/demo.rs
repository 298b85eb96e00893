//! The demo's throwaway repository and its story: about 60 commits of a small kernel
//! project made from data embedded in the binary, in which one commit breaks the build
//! (fixed some commits later), one makes a kernel return a wrong result, one makes a kernel
//! measurably slower, and most change nothing that matters. `app/demo.rs` runs the
//! commands' work on it, in process, and tells the story.

use std::path::Path;

/// Why the demo repository could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The repository could not be created.
    #[error("failed to create the demo repository")]
    Init(#[source] git2::Error),
    /// A commit could not be made.
    #[error(transparent)]
    Git(#[from] git2::Error),
    /// A file of the history could not be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What the demo learns about the machine it runs on: `repro env capture`, `env lock` and
/// `env check`, called as engine functions on the demo repository.
#[derive(Clone, Debug)]
pub struct Machine {
    /// The first GPU's name, if CUDA sees one.
    pub gpu: Option<String>,
    /// The NVRTC version builds would use, if one is found.
    pub nvrtc: Option<String>,
    /// The lockfile written (`lockfiles/demo.toml` in the repository).
    pub lockfile: std::path::PathBuf,
    /// How many of its rules have each policy.
    pub policies: crate::engines::lockfile::PolicyCounts,
    /// The check of this machine against it.
    pub counts: crate::engines::check::Counts,
    /// Whether the check passed.
    pub passed: bool,
}

/// Fingerprints the machine from the demo repository `root`, writes `lockfiles/demo.toml`
/// from it and checks the machine against what was written (read back, as `env check`
/// reads any lockfile).
pub fn machine(
    root: &Path,
    python: Option<std::path::PathBuf>,
) -> Result<Machine, crate::engines::lockfile::LockfileError> {
    use crate::engines::{check, fingerprint, lockfile};
    let ctx = fingerprint::Context {
        cwd: root.to_path_buf(),
        fresh: true,
        python,
    };
    let fp = fingerprint::capture(&ctx, &fingerprint::Demand::all());
    let value = |k: &str| fp.get(k).value().map(str::to_string);
    let path = root.join("lockfiles").join("demo.toml");
    lockfile::write(&path, "demo", &fp, false)?;
    let lock = lockfile::load(&path)?;
    let report = check::check(&lock.rules, |k| fp.lookup(k));
    Ok(Machine {
        gpu: value("gpu.devices.0.name"),
        nvrtc: value("toolchain.nvrtc.version"),
        lockfile: path,
        policies: lock.policy_counts(),
        counts: report.counts(),
        passed: report.passes(false),
    })
}

/// Commits in the history.
pub const COMMITS: usize = 60;
/// The commit that breaks the build.
pub const BREAKS: usize = 20;
/// The commit that fixes it.
pub const FIXES: usize = 26;
/// The commit that makes vector_add return a wrong last element.
pub const WRONG: usize = 33;
/// The commit that makes spin 3% slower.
pub const SLOWER: usize = 45;

const COMMON: &str = "// Helpers shared by the demo kernels.\n#define BLOCK 256\n";

fn vector_add(i: usize) -> String {
    let semicolon = if (BREAKS..FIXES).contains(&i) {
        ""
    } else {
        ";"
    };
    // From WRONG on, the last element is left unwritten: only a check against the reference sees it.
    let bound = if i >= WRONG { "n - 1" } else { "n" };
    format!(
        "#include \"common.cuh\"\n// vector_add, revision {i}\nextern \"C\" __global__ void vector_add(const float* a, const float* b, float* c, int n) {{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < {bound}) c[i] = a[i] + b[i]{semicolon}\n}}\nextern \"C\" __global__ void vector_add_ref(const float* a, const float* b, float* c, int n) {{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n}}\n"
    )
}

fn spin(i: usize) -> String {
    let iters = if i >= SLOWER { 20600 } else { 20000 };
    format!(
        "#include \"common.cuh\"\n// spin: a compute-bound kernel of about 160 us on an H200\nextern \"C\" __global__ void spin(float* a, int n) {{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n    float x = a[i];\n    for (int k = 0; k < {iters}; ++k) x = fmaf(x, 1.0001f, 1e-7f);\n    a[i] = x;\n}}\n"
    )
}

const VECTOR_ADD_RECIPE: &str = "schema = 1\ndescription = \"c = a + b\"\n\n[build]\nkind = \"nvrtc\"\nsource = \"kernels/vector_add.cu\"\nentries = [\"vector_add\", \"vector_add_ref\"]\ntarget = \"sm_90\"\n\n[params]\nn = 1048576\n\n[run]\nkernel = \"vector_add\"\ngrid = \"ceil_div(n, 256)\"\nblock = 256\nargs = [\n  { name = \"a\", buffer = \"f32\", count = \"n\", init = \"normal\" },\n  { name = \"b\", buffer = \"f32\", count = \"n\", init = \"normal\" },\n  { name = \"c\", buffer = \"f32\", count = \"n\", output = true },\n  { name = \"n\", scalar = \"i32\", value = \"n\" },\n]\n\n[check]\nkernel = \"vector_add_ref\"\natol = 0.0\nrtol = 0.0\n";

const SPIN_RECIPE: &str = "schema = 1\ndescription = \"a compute-bound kernel\"\n\n[build]\nkind = \"nvrtc\"\nsource = \"kernels/spin.cu\"\nentries = [\"spin\"]\ntarget = \"sm_90\"\n\n[params]\nn = 262144\n\n[run]\nkernel = \"spin\"\ngrid = \"ceil_div(n, 256)\"\nblock = 256\nargs = [\n  { name = \"a\", buffer = \"f32\", count = \"n\", init = \"uniform\" },\n  { name = \"n\", scalar = \"i32\", value = \"n\" },\n]\n";

/// Writes the demo history with git2 (no git binary needed), oldest commit first.
pub fn make_history(root: &Path) -> Result<Vec<String>, DemoError> {
    let repo = git2::Repository::init(root).map_err(DemoError::Init)?;
    let sig = git2::Signature::new(
        "repro demo",
        "demo@repro.invalid",
        &git2::Time::new(1_767_225_600, 0),
    )?;
    let write = |rel: &str, text: &str| -> Result<(), DemoError> {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("relative paths have a parent"))?;
        std::fs::write(p, text)?;
        Ok(())
    };
    let mut hashes = Vec::new();
    let mut parent: Option<git2::Oid> = None;
    for i in 1..=COMMITS {
        let subject = match i {
            1 => "Add vector_add and spin kernels with their recipes".to_string(),
            BREAKS => "Tidy vector_add (breaks the build)".to_string(),
            FIXES => "Fix the missing semicolon in vector_add".to_string(),
            WRONG => "Shorten vector_add's bounds check (wrong last element)".to_string(),
            SLOWER => "More iterations in spin (3% slower)".to_string(),
            _ => format!("Update notes ({i})"),
        };
        if i == 1 {
            write("kernels/common.cuh", COMMON)?;
            write("recipes/vector_add.toml", VECTOR_ADD_RECIPE)?;
            write("recipes/spin.toml", SPIN_RECIPE)?;
            write(".gitignore", "/.repro\n")?;
        }
        write("kernels/vector_add.cu", &vector_add(i))?;
        write("kernels/spin.cu", &spin(i))?;
        write("docs/NOTES.md", &format!("# Notes\n\nRevision {i}.\n"))?;
        let mut index = repo.index()?;
        index.add_all(["*"].iter(), git2::IndexAddOption::DEFAULT, None)?;
        index.write()?;
        let tree = repo.find_tree(index.write_tree()?)?;
        let parents: Vec<git2::Commit> = parent
            .map(|p| repo.find_commit(p))
            .transpose()?
            .into_iter()
            .collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        let oid = repo.commit(
            Some("HEAD"),
            &sig,
            &sig,
            &format!("{subject}\n"),
            &tree,
            &refs,
        )?;
        parent = Some(oid);
        hashes.push(oid.to_string());
    }
    Ok(hashes)
}
