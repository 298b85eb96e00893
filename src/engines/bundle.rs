//! Bundles: everything an artifact-evaluation committee asks for, in one deterministic
//! `.tar.zst` (see [`crate::foundation::archive`]).
//!
//! Layout:
//! ```text
//! README.md                    the claims, the command that replays each, the hardware needed
//! MANIFEST                     sha256 of every file
//! results.csv, results.md      one row per result
//! results.svg                  medians with their 95% intervals
//! results/ID.json              result records, with every raw sample and the fingerprint
//! builds/KEY.json              build records (inputs, compiler identity, outputs)
//! profiles/ID.json             profile records (`repro profile`), with their metrics
//! artifacts/SHA256             the built PTX and CUBIN, and the profiles' `.ncu-rep` reports
//! source/COMMIT/...            the tree at each recorded commit (or only the recipe's inputs)
//! ```
//! Nothing in it depends on when or where it was made: the same records give the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use git2::{Oid, Repository};
use serde_json::{Value, json};

use crate::engines::export::{self, Row};
use crate::foundation::archive::{self, Entry};
use crate::foundation::git::CommitFiles;
use crate::foundation::keys;
use crate::foundation::records::{self, BuildRecord, RecordError, ResultRecord};
use crate::foundation::store::Store;

/// A record's recipe: its name, and the (path, text) its build record kept, if any.
type RecipeRef = (String, Option<(String, String)>);

/// What goes into a bundle: result records and build records, by ID/key.
#[derive(Default)]
pub struct Contents {
    /// Result ID → record.
    pub results: BTreeMap<String, ResultRecord>,
    /// Build key → record.
    pub builds: BTreeMap<String, BuildRecord>,
    /// Profile ID → record (`profiles/ID.json`, its `.ncu-rep` under `artifacts/`).
    pub profiles: BTreeMap<String, records::ProfileRecord>,
}

/// Why a bundle cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A record's commit is not in the repository.
    #[error("commit {commit} of {what} is not in this repository")]
    MissingCommit {
        /// The commit.
        commit: String,
        /// Which record.
        what: String,
    },
    /// A record names no commit (built outside a repository).
    #[error("{what} records no commit, so its sources cannot be bundled")]
    NoCommit {
        /// Which record.
        what: String,
    },
    /// A stored object is missing or corrupt.
    #[error(transparent)]
    Store(#[from] crate::foundation::store::StoreError),
    /// A record (from a bundle or a store) holds a field that is not what it claims to be.
    #[error("{record}: {}", field_problem(field, problem))]
    InvalidRecord {
        /// Which record ("build 1a2b3c…", "result …").
        record: String,
        /// The field.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A record was made from a working tree with uncommitted changes: its sources are in no
    /// commit, so it cannot be bundled or replayed.
    #[error("{what} was made from a working tree with uncommitted changes (diff {digest})")]
    Dirty {
        /// Which record.
        what: String,
        /// The digest of the uncommitted changes.
        digest: String,
    },
    /// The sources cannot be read.
    #[error("cannot read the sources of commit {commit}: {reason}")]
    Source {
        /// The commit.
        commit: String,
        /// Why.
        reason: String,
    },
}

/// What `repro bundle verify` and `bundle show` find in a bundle, in one pass: every member
/// against MANIFEST, and every record (`results/`, `builds/`, `profiles/`) checked as a
/// replay checks it before using it.
pub struct Inspection {
    /// The members against MANIFEST, their list, and the member asked to be kept.
    pub scan: archive::Scan,
    /// The records that fail their checks: the member's path and what is wrong, in bundle
    /// order.
    pub invalid: Vec<(String, String)>,
}

impl Inspection {
    /// Whether the bundle matches its MANIFEST and every record passes its checks.
    pub fn ok(&self) -> bool {
        self.scan.verification.ok() && self.invalid.is_empty()
    }
}

/// The kind and name of a record member of a bundle (`results/ID.json`: `result`, `ID`).
fn record_member(path: &str) -> Option<(&'static str, &str)> {
    let (dir, file) = path.split_once('/')?;
    let name = file.strip_suffix(".json").filter(|n| !n.contains('/'))?;
    let kind = match dir {
        "results" => "result",
        "builds" => "build",
        "profiles" => "profile",
        _ => return None,
    };
    Some((kind, name))
}

/// Reads the bundle at `path` once, in bounded memory: [`archive::scan`] (keeping the
/// first bytes of `keep`), and every record checked ([`validate_record`],
/// [`validate_profile`]) as it is read. A record larger than a store's largest is invalid.
pub fn inspect(
    path: &std::path::Path,
    progress: &dyn Fn(u64, u64),
    keep: Option<&str>,
) -> Result<Inspection, archive::ArchiveError> {
    let mut invalid = Vec::new();
    let mut builds: Vec<(String, BuildRecord)> = Vec::new();
    let mut visit = |member: &str, bytes: Option<&[u8]>| {
        let Some((kind, name)) = record_member(member) else {
            return;
        };
        let problem = match bytes {
            None => Some(format!(
                "is larger than a record may be ({} bytes)",
                crate::foundation::store::MAX_RECORD_BYTES
            )),
            Some(b) => match serde_json::from_slice::<Value>(b) {
                Err(e) => Some(format!("is not JSON: {e}")),
                Ok(v) => match kind {
                    "profile" => validate_profile(name, &v).err().map(|e| e.to_string()),
                    _ => match validate_record(kind, name, &v) {
                        Ok(Checked::Build(b)) => {
                            builds.push((member.to_string(), *b));
                            None
                        }
                        Ok(Checked::Result(_)) => None,
                        Err(e) => Some(e.to_string()),
                    },
                },
            },
        };
        if let Some(p) = problem {
            invalid.push((member.to_string(), p));
        }
    };
    let mut whole = archive::Whole {
        wanted: &|m| record_member(m).is_some(),
        max: crate::foundation::store::MAX_RECORD_BYTES,
        visit: &mut visit,
    };
    let scan = archive::scan_with(path, progress, keep, &mut whole)?;
    invalid.extend(sources_problems(&builds, &scan.digests));
    Ok(Inspection { scan, invalid })
}

/// The build records whose bundled sources are not what they were built from: each input
/// file (`inputs.files`, path -> sha256) must lie at `source/COMMIT/PATH` with that digest,
/// as `repro replay` requires before it builds. (member, problem) per record, the first
/// difference named.
fn sources_problems(
    builds: &[(String, BuildRecord)],
    digests: &std::collections::BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (member, b) in builds {
        let Some(commit) = &b.commit else {
            continue;
        };
        let wrong = b.inputs.files.iter().find_map(|(path, want)| {
            let at = format!("source/{commit}/{path}");
            match digests.get(&at) {
                None => Some(format!("`inputs.files` names {at}, which the bundle lacks")),
                Some(d) if d != want => Some(format!(
                    "`inputs.files` gives {} for {at}, which holds {} (not the sources it was built from)",
                    keys::short(want),
                    keys::short(d)
                )),
                Some(_) => None,
            }
        });
        if let Some(w) = wrong {
            problems.push((member.clone(), crate::foundation::output::sanitize(&w)));
        }
    }
    problems
}

/// An invalid record's field and problem as its message says them: the field in backticks,
/// none where the problem is the whole record's (it names what it is about).
fn field_problem(field: &str, problem: &str) -> String {
    if field == "(record)" {
        problem.to_string()
    } else {
        format!("`{field}` {problem}")
    }
}

/// A record, checked: what [`validate_record`] returns.
#[derive(Clone, Debug)]
pub enum Checked {
    /// A build record.
    Build(Box<BuildRecord>),
    /// A result record.
    Result(Box<ResultRecord>),
}

/// Reads a record (from a bundle or a store) and checks that every field repro will use as
/// a path, a key or a name is what it claims to be, and that the record's ID recomputes from
/// its content: a build's key from its inputs, a result's ID from the rest of it. `kind` is
/// `build` or `result`.
pub fn validate_record(kind: &str, id: &str, rec: &Value) -> Result<Checked, BundleError> {
    let check = Check { kind, id };
    if !rec.is_object() {
        return Err(check.bad("(record)", "is not a JSON object".into()));
    }
    if !keys::is_key(id) {
        return Err(check.bad("(file name)", "is not a 64-digit hex key".into()));
    }
    match kind {
        "build" => check.build(rec).map(|b| Checked::Build(Box::new(b))),
        _ => check.result(rec).map(|r| Checked::Result(Box::new(r))),
    }
}

/// The record [`validate_record`] checks, and the errors it names.
struct Check<'a> {
    kind: &'a str,
    id: &'a str,
}

impl Check<'_> {
    /// The error for a field that is not what it claims to be.
    fn bad(&self, field: &str, problem: String) -> BundleError {
        BundleError::InvalidRecord {
            record: format!(
                "{} {}",
                self.kind,
                crate::foundation::output::sanitize(keys::short(self.id))
            ),
            field: field.to_string(),
            problem,
        }
    }

    /// A hostile value, cut short and made safe to print.
    fn shown(t: &str) -> String {
        let t: String = t.chars().take(60).collect();
        crate::foundation::output::sanitize(&t)
    }

    /// An optional field, which must pass `ok` where present.
    fn opt(
        &self,
        field: &str,
        v: Option<&str>,
        ok: fn(&str) -> bool,
        what: &str,
    ) -> Result<(), BundleError> {
        match v {
            Some(s) if !ok(s) => Err(self.bad(
                field,
                format!("is {}, not {what}", Self::shown(&json!(s).to_string())),
            )),
            _ => Ok(()),
        }
    }

    /// A typed record's own error, as a field error of the whole record.
    fn typed(&self, e: RecordError) -> BundleError {
        let text = match e {
            RecordError::Shape { at, source, .. } => format!("{at}{source}"),
            e => e.to_string(),
        };
        // The record's own error names the record, as this one's message does already.
        let named = format!("{} {}", self.kind, keys::short(self.id));
        let text = text
            .strip_prefix(&format!("{named}: "))
            .or_else(|| text.strip_prefix(&format!("{named} ")))
            .unwrap_or(&text);
        let text: String = text.chars().take(200).collect();
        self.bad("(record)", crate::foundation::output::sanitize(&text))
    }

    /// A map of relative paths to sha256 digests (a build's input files or outputs).
    fn path_digests<'b>(
        &self,
        field: &str,
        entries: impl Iterator<Item = (&'b String, &'b String)>,
    ) -> Result<(), BundleError> {
        for (path, digest) in entries {
            if !keys::is_relative_path(path) {
                return Err(self.bad(
                    field,
                    format!(
                        "names {}, not a relative path",
                        Self::shown(&json!(path).to_string())
                    ),
                ));
            }
            if !keys::is_key(digest) {
                return Err(self.bad(
                    field,
                    format!(
                        "gives {} for {path}, not a sha256",
                        Self::shown(&json!(digest).to_string())
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A build record: its key is the hash of its inputs.
    fn build(&self, rec: &Value) -> Result<BuildRecord, BundleError> {
        let b = BuildRecord::from_json(rec, &format!("build {}", keys::short(self.id)))
            .map_err(|e| self.typed(e))?;
        // The inputs type keeps every member as written, so this is the hash of the
        // inputs as the file has them.
        if keys::key_of(&records::to_json(&b.inputs)) != self.id {
            return Err(self.bad("inputs", "do not hash to the record's key".into()));
        }
        if b.inputs.schema != records::SCHEMA {
            return Err(self.bad(
                "inputs.schema",
                format!(
                    "is {}; this repro reads schema {}",
                    b.inputs.schema,
                    records::SCHEMA
                ),
            ));
        }
        self.opt("recipe", Some(&b.recipe), keys::is_name, "a recipe name")?;
        self.opt(
            "recipe-path",
            Some(&b.recipe_path),
            keys::is_relative_path,
            "a relative path",
        )?;
        self.path_digests("inputs.files", b.inputs.files.iter())?;
        self.path_digests("outputs", b.outputs.iter().map(|(n, o)| (n, &o.sha256)))?;
        Ok(b)
    }

    /// A result record: its ID is the hash of the rest of it.
    fn result(&self, rec: &Value) -> Result<ResultRecord, BundleError> {
        let mut content = rec.clone();
        if let Some(o) = content.as_object_mut() {
            o.remove("id");
        }
        if keys::key_of(&content) != self.id {
            return Err(self.bad("(content)", "does not hash to the result's ID".into()));
        }
        let r = ResultRecord::from_json(&content, &format!("result {}", keys::short(self.id)))
            .map_err(|e| self.typed(e))?;
        self.opt(
            "recipe",
            r.recipe.as_deref(),
            keys::is_name,
            "a recipe name",
        )?;
        self.opt(
            "recipe-path",
            r.recipe_path.as_deref(),
            keys::is_relative_path,
            "a relative path",
        )?;
        self.opt(
            "build-key",
            r.build_key.as_deref(),
            keys::is_key,
            "a 64-digit hex key",
        )?;
        self.opt("artifact", r.artifact.as_deref(), keys::is_key, "a sha256")?;
        if !r.samples.iter().all(|x| x.is_finite()) {
            return Err(self.bad("samples", "is not a list of finite numbers".into()));
        }
        Ok(r)
    }
}

/// A profile from a bundle or a store, checked as [`validate_record`] checks results: its ID
/// recomputes from its content, and every field repro uses as a name, key or path is what it
/// claims; its metrics are finite numbers.
pub fn validate_profile(id: &str, rec: &Value) -> Result<records::ProfileRecord, BundleError> {
    check_profile(id, rec).map_err(|(field, problem)| BundleError::InvalidRecord {
        record: format!(
            "profile {}",
            crate::foundation::output::sanitize(keys::short(id))
        ),
        field: field.to_string(),
        problem: crate::foundation::output::sanitize(
            &problem.chars().take(120).collect::<String>(),
        ),
    })
}

fn check_profile(id: &str, rec: &Value) -> Result<records::ProfileRecord, (&'static str, String)> {
    if !keys::is_key(id) {
        return Err(("(file name)", "is not a 64-digit hex key".into()));
    }
    let mut content = rec.clone();
    if let Some(o) = content.as_object_mut() {
        o.remove("id");
    }
    if keys::key_of(&content) != id {
        return Err(("(content)", "does not hash to the profile's ID".into()));
    }
    let p = records::ProfileRecord::from_json(&content, &format!("profile {}", keys::short(id)))
        .map_err(|e| ("(record)", e.to_string()))?;
    if p.commit.as_deref().is_some_and(|c| !keys::is_commit(c)) {
        return Err(("commit", "is not a 40-digit hex commit".into()));
    }
    if !keys::is_name(&p.recipe) {
        return Err(("recipe", "is not a recipe name".into()));
    }
    if !keys::is_relative_path(&p.recipe_path) {
        return Err(("recipe-path", "is not a relative path".into()));
    }
    if !keys::is_key(&p.build_key) {
        return Err(("build-key", "is not a 64-digit hex key".into()));
    }
    for (name, out) in &p.outputs {
        if !keys::is_name(name) || !keys::is_key(&out.sha256) {
            return Err((
                "outputs",
                format!("gives {} for {name}, not a sha256", out.sha256),
            ));
        }
    }
    if let Some((m, _)) = p
        .metrics
        .iter()
        .find(|(_, v)| v.value.is_some_and(|x| !x.is_finite()))
    {
        return Err(("metrics", format!("`{m}` is not a finite number")));
    }
    Ok(p)
}

/// Collects the build records that the results, profiles (and given builds) refer to.
pub fn complete(store: &Store, contents: &mut Contents) -> Result<(), BundleError> {
    let keys: Vec<String> = contents
        .results
        .values()
        .filter_map(|r| r.build_key.clone())
        .chain(contents.profiles.values().map(|p| p.build_key.clone()))
        .collect();
    for key in keys {
        if let Some(rec) = store.get_record(records::BUILDS, &key)? {
            let b = BuildRecord::from_json(&rec, &format!("build {}", keys::short(&key))).map_err(
                |e| BundleError::InvalidRecord {
                    record: format!("build {}", keys::short(&key)),
                    field: "(record)".into(),
                    problem: e.to_string(),
                },
            )?;
            contents.builds.insert(key, b);
        }
    }
    Ok(())
}

/// A bundle's files as they are gathered: path → (bytes, executable).
type Files = BTreeMap<String, (Vec<u8>, bool)>;

/// All the files of a bundle.
pub fn entries(
    repo: &Repository,
    store: &Store,
    contents: &Contents,
    inputs_only: bool,
    bundle_name: &str,
) -> Result<Vec<Entry>, BundleError> {
    let mut files = Files::new();
    refuse_dirty(contents)?;
    for (commit, recipes) in &commit_recipes(contents)? {
        put_sources(&mut files, repo, commit, recipes, inputs_only)?;
    }
    put_records(&mut files, store, contents)?;
    put_tables(&mut files, contents);
    files.insert(
        "README.md".into(),
        (readme(contents, bundle_name).into_bytes(), false),
    );
    Ok(files
        .into_iter()
        .map(|(path, (bytes, executable))| Entry {
            path,
            bytes,
            executable,
        })
        .collect())
}

/// A record from a dirty tree has sources in no commit: bundling the commit's tree would
/// make a bundle that cannot replay.
fn refuse_dirty(contents: &Contents) -> Result<(), BundleError> {
    for (what, id, dirty) in contents
        .results
        .iter()
        .map(|(id, r)| ("result", id, r.dirty.then(|| "unknown".to_string())))
        .chain(
            contents
                .builds
                .iter()
                .map(|(k, b)| ("build", k, b.dirty.clone())),
        )
    {
        if let Some(digest) = dirty {
            return Err(BundleError::Dirty {
                what: format!("{what} {}", keys::short(id)),
                digest: keys::short(&digest).to_string(),
            });
        }
    }
    Ok(())
}

/// Sources: one tree per distinct commit, with the recipes its records were built with
/// (the text a build record keeps, or else the commit's own recipe file).
fn commit_recipes(contents: &Contents) -> Result<BTreeMap<String, Vec<RecipeRef>>, BundleError> {
    let mut commits: BTreeMap<String, Vec<RecipeRef>> = BTreeMap::new();
    let recipe_of = |b: &BuildRecord| -> RecipeRef {
        (
            b.recipe.clone(),
            b.recipe_text.clone().map(|t| (b.recipe_path.clone(), t)),
        )
    };
    for (id, r) in &contents.results {
        let c = r.commit.as_deref().ok_or_else(|| BundleError::NoCommit {
            what: format!("result {}", keys::short(id)),
        })?;
        let build_recipe = r
            .build_key
            .as_deref()
            .and_then(|k| contents.builds.get(k))
            .map(recipe_of);
        commits
            .entry(c.to_string())
            .or_default()
            .extend(build_recipe.or_else(|| r.recipe.clone().map(|n| (n, None))));
    }
    for (key, b) in &contents.builds {
        let c = b.commit.as_deref().ok_or_else(|| BundleError::NoCommit {
            what: format!("build {}", keys::short(key)),
        })?;
        commits.entry(c.to_string()).or_default().push(recipe_of(b));
    }
    Ok(commits)
}

/// One commit's sources: its whole tree, or only its recipes' inputs and pinned environment.
fn put_sources(
    files: &mut Files,
    repo: &Repository,
    commit: &str,
    recipes: &[RecipeRef],
    inputs_only: bool,
) -> Result<(), BundleError> {
    let missing = || BundleError::MissingCommit {
        commit: commit.to_string(),
        what: "a record".into(),
    };
    let oid = Oid::from_str(commit).map_err(|_| missing())?;
    let tree = CommitFiles::new(repo, oid).map_err(|_| missing())?;
    // Recipes held fixed from outside the history (a bisection's) travel as files at
    // their paths, so that the bundle's tree rebuilds with them.
    for (_, text) in recipes.iter() {
        if let Some((path, text)) = text
            && !tree.is_file_in_tree(path)
            && crate::foundation::recipe::normalize(path).as_deref() == Some(path.as_str())
        {
            files.insert(
                format!("source/{commit}/{path}"),
                (text.clone().into_bytes(), false),
            );
        }
    }
    let paths: Vec<String> = if inputs_only {
        input_paths(&tree, commit, recipes)?
    } else {
        tree.paths()
    };
    for p in paths {
        let bytes = crate::engines::build::inputs::FileSource::read(&tree, &p).map_err(|e| {
            BundleError::Source {
                commit: commit.to_string(),
                reason: e.to_string(),
            }
        })?;
        files.insert(format!("source/{commit}/{p}"), (bytes, false));
    }
    Ok(())
}

/// The paths an `--inputs-only` bundle keeps of one commit: each recipe's inputs, and what
/// a reader needs besides them (the pinned environment).
fn input_paths(
    tree: &CommitFiles,
    commit: &str,
    recipes: &[RecipeRef],
) -> Result<Vec<String>, BundleError> {
    let mut p = Vec::new();
    for (name, text) in recipes {
        let source = |reason: String| BundleError::Source {
            commit: commit.to_string(),
            reason,
        };
        let (rel, own) = match text {
            Some((path, text)) => ((path.clone(), text.clone()), false),
            None => {
                let rel = format!("{}/{name}.toml", crate::foundation::recipe::DIR);
                let bytes = crate::engines::build::inputs::FileSource::read(tree, &rel)
                    .map_err(|e| source(e.to_string()))?;
                ((rel, String::from_utf8_lossy(&bytes).into_owned()), true)
            }
        };
        let r = crate::foundation::recipe::parse_detached(&rel.0, &rel.1)
            .map_err(|e| source(e.to_string()))?;
        p.extend(
            crate::engines::bisect::local::recipe_paths(tree, &r, own, &mut |_| false)
                .map_err(|e| source(e.why))?,
        );
    }
    p.extend(tree.paths().into_iter().filter(|f| {
        f == "flake.nix" || f == "flake.lock" || f == "repro.toml" || f.starts_with("lockfiles/")
    }));
    p.sort();
    p.dedup();
    Ok(p)
}

/// The records themselves, the artifacts the build records name and the profiles' reports.
fn put_records(files: &mut Files, store: &Store, contents: &Contents) -> Result<(), BundleError> {
    let pretty = |v: Value| (serde_json::to_string_pretty(&v).expect("JSON") + "\n").into_bytes();
    // A result's or a profile's ID is the hash of its JSON as stored, which its typed
    // form need not write back alike (a sample stored as `1` is written `1.0`): the stored
    // JSON goes into the bundle, so that its ID still holds there.
    let stored = |kind: &str, id: &str, typed: Value| -> Result<Value, BundleError> {
        Ok(store.get_record(kind, id)?.unwrap_or(typed))
    };
    for (id, r) in &contents.results {
        files.insert(
            format!("results/{id}.json"),
            (
                pretty(stored(records::RESULTS, id, records::to_json(r))?),
                false,
            ),
        );
        // A Python call's result: the environment it ran in, as pip can recreate it.
        if let Some(list) = r.python.as_ref().and(python_requirements(&r.fingerprint)) {
            files.insert(format!("python/{id}.txt"), (list.into_bytes(), false));
        }
    }
    for (id, p) in &contents.profiles {
        files.insert(
            format!("profiles/{id}.json"),
            (
                pretty(stored(records::PROFILES, id, records::to_json(p))?),
                false,
            ),
        );
        for digest in p.outputs.values().map(|o| o.sha256.clone()) {
            files.insert(
                format!("artifacts/{digest}"),
                (store.get_blob(&digest)?, false),
            );
        }
    }
    for (key, b) in &contents.builds {
        files.insert(
            format!("builds/{key}.json"),
            (pretty(records::to_json(b)), false),
        );
        for digest in b.outputs.values().map(|o| o.sha256.clone()) {
            files.insert(
                format!("artifacts/{digest}"),
                (store.get_blob(&digest)?, false),
            );
        }
    }
    Ok(())
}

/// The tables and charts of the results: CSV, Markdown, SVG, and one plot per recipe with
/// several results (a sweep, or several commits).
fn put_tables(files: &mut Files, contents: &Contents) {
    let rows: Vec<Row> = contents
        .results
        .iter()
        .map(|(id, r)| Row::from_record(id, r))
        .collect();
    files.insert(
        "results.csv".into(),
        (export::csv(&rows).into_bytes(), false),
    );
    files.insert(
        "results.md".into(),
        (export::markdown(&rows).into_bytes(), false),
    );
    files.insert("results.svg".into(), (svg(&rows).into_bytes(), false));
    let mut by_name: BTreeMap<String, Vec<(&String, &ResultRecord)>> = BTreeMap::new();
    for (id, r) in &contents.results {
        by_name.entry(r.name.clone()).or_default().push((id, r));
    }
    for (name, list) in by_name.into_iter().filter(|(_, l)| l.len() > 1) {
        let points: Vec<crate::foundation::plot::Point> = list
            .iter()
            .enumerate()
            .map(|(i, (id, r))| crate::foundation::plot::Point {
                x: i as f64,
                label: format!("{} {}", r.params_text(), keys::short(id)),
                y: r.median(),
                ci: r.summary.as_ref().map(|s| (s.ci_low, s.ci_high)),
                verdict: r.verdict.word().to_string(),
            })
            .collect();
        let unit = list[0].1.unit.as_str();
        let file = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>();
        let svg = crate::foundation::plot::render(
            &name,
            "result",
            &format!("median ({unit})"),
            &points,
            &[],
            false,
        );
        files.insert(format!("plots/{file}.svg"), (svg.into_bytes(), false));
    }
}

use crate::foundation::plot::xml_text as esc;

/// A horizontal chart of each result's median with its 95% interval (one row per result,
/// each scaled to its own maximum, since results may be of different kernels).
pub fn svg(rows: &[Row]) -> String {
    let (w, row_h, left) = (760.0, 28.0, 300.0);
    let h = 40.0 + row_h * rows.len().max(1) as f64;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    let _ = writeln!(out, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        out,
        "<text x=\"10\" y=\"20\" font-size=\"14\">median with 95% interval (each bar scaled to its own range)</text>"
    );
    for (i, r) in rows.iter().enumerate() {
        let y = 40.0 + row_h * i as f64;
        let label = format!(
            "{} {} ({})",
            r.name,
            r.params,
            crate::foundation::keys::short(&r.id)
        );
        let _ = writeln!(
            out,
            "<text x=\"10\" y=\"{:.1}\">{}</text>",
            y + 14.0,
            esc(&label)
        );
        if let (Some(m), Some(lo), Some(hi), Some(max)) = (r.median, r.ci_low, r.ci_high, r.max) {
            let scale = (w - left - 120.0) / max.max(f64::MIN_POSITIVE);
            let x = |v: f64| left + v * scale;
            let _ = writeln!(
                out,
                "<rect x=\"{left}\" y=\"{:.1}\" width=\"{:.1}\" height=\"12\" fill=\"#8fb3d9\"/>",
                y + 4.0,
                (m * scale).max(0.5)
            );
            let _ = writeln!(
                out,
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\" stroke-width=\"2\"/>",
                x(lo),
                y + 10.0,
                x(hi),
                y + 10.0
            );
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\">{:.3} {}</text>",
                x(hi) + 6.0,
                y + 14.0,
                m,
                esc(&r.unit)
            );
        } else {
            let _ = writeln!(
                out,
                "<text x=\"{left}\" y=\"{:.1}\">{}</text>",
                y + 14.0,
                esc(&r.verdict)
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

/// The bundle's README: each claim, the exact command that replays it, the hardware it needs.
pub fn readme(contents: &Contents, bundle_name: &str) -> String {
    let mut s = String::new();
    readme_intro(&mut s, bundle_name);
    if contents
        .results
        .iter()
        .any(|(_, r)| r.python.is_some() && python_requirements(&r.fingerprint).is_some())
    {
        let _ = writeln!(
            s,
            "- Python: `python/ID.txt` lists every distribution installed where result ID ran;\n  `python -m pip install -r python/ID.txt` in a fresh virtual environment recreates it.\n"
        );
    }
    if !contents.results.is_empty() {
        readme_claims(&mut s, contents, bundle_name);
    }
    if !contents.builds.is_empty() {
        readme_builds(&mut s, contents, bundle_name);
    }
    let _ = writeln!(s, "## Layout\n");
    let _ = writeln!(
        s,
        "`results/ID.json` (every raw sample and the machine's fingerprint), `builds/KEY.json` (the"
    );
    let _ = writeln!(
        s,
        "inputs of each build key), `artifacts/SHA256` (PTX, CUBIN), `source/COMMIT/` (the tree at each"
    );
    let _ = writeln!(
        s,
        "commit), `results.csv`, `results.md`, `results.svg`, and `MANIFEST` (sha256 of every file)."
    );
    s
}

/// The README's opening: what the bundle is and how to get its environment.
fn readme_intro(s: &mut String, bundle_name: &str) {
    let _ = writeln!(s, "# Reproducible results\n");
    let _ = writeln!(
        s,
        "This bundle holds the sources, build records, artifacts and raw measurements behind the"
    );
    let _ = writeln!(
        s,
        "results below, made by `repro bundle create`. `repro bundle verify {bundle_name}` checks every"
    );
    let _ = writeln!(
        s,
        "file against `MANIFEST`. Each claim replays with the command beside it, in any directory"
    );
    let _ = writeln!(
        s,
        "(no repository needed): it rebuilds the artifact and requires it byte-identical, and on a"
    );
    let _ = writeln!(
        s,
        "GPU re-runs the measurement and compares it with the recorded samples.\n"
    );
    let _ = writeln!(s, "## Getting the environment\n");
    let _ = writeln!(
        s,
        "- repro: `cargo install repro`, or `nix run` in a source directory below that has a `flake.nix`."
    );
    let _ = writeln!(
        s,
        "- NVRTC: `repro toolchain install` in the source directory (pinned by sha256 in `repro.toml`), or"
    );
    let _ = writeln!(
        s,
        "  `nix develop` in the source directory for the pinned shell. The GPU driver comes from the host:"
    );
    let _ = writeln!(
        s,
        "  `repro env check --lock lockfiles/NAME.toml` in the source directory says whether yours matches.\n"
    );
}

/// The README's claims: one row per result, with the command that replays it.
fn readme_claims(s: &mut String, contents: &Contents, bundle_name: &str) {
    let _ = writeln!(s, "## Claims\n");
    let _ = writeln!(
        s,
        "| result | recipe | parameters | median [95% CI] | samples | machine | driver / CUDA | replay |"
    );
    let _ = writeln!(s, "|---|---|---|---|---:|---|---|---|");
    for (id, r) in &contents.results {
        let unit = &r.unit;
        let med = match &r.summary {
            Some(sm) => format!(
                "{:.4} {unit} [{:.4}, {:.4}]",
                sm.median, sm.ci_low, sm.ci_high
            ),
            None => r.verdict.word().to_string(),
        };
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} | {} | {} / {} | `repro replay {} --bundle {bundle_name}` |",
            keys::short(id),
            r.name,
            r.params_text(),
            med,
            r.samples.len(),
            r.machine,
            r.fingerprint_field("driver.version").unwrap_or("-"),
            r.fingerprint_field("driver.cuda-version").unwrap_or("-"),
            keys::short(id),
        );
    }
    let _ = writeln!(
        s,
        "\nA replay of one result takes about the original measurement's time plus one build"
    );
    let _ = writeln!(
        s,
        "(settings, sample counts and build times are in `results/` and `builds/`).\n"
    );
}

/// The README's builds: one row per build record, with the command that replays it.
fn readme_builds(s: &mut String, contents: &Contents, bundle_name: &str) {
    let _ = writeln!(s, "## Builds\n");
    let _ = writeln!(
        s,
        "| build key | recipe | commit | compiler | outputs | replay |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for (key, b) in &contents.builds {
        let outs: Vec<String> = b
            .outputs
            .iter()
            .map(|(k, v)| format!("{k} {}", keys::short(&v.sha256)))
            .collect();
        let _ = writeln!(
            s,
            "| `{}` | {} | `{}` | {} {} | {} | `repro replay {} --bundle {bundle_name}` ({:.0} ms to build) |",
            keys::short(key),
            b.recipe,
            b.commit
                .as_deref()
                .map_or("-".into(), |c| c.chars().take(12).collect::<String>()),
            b.inputs.compiler_field("name").unwrap_or("?"),
            b.inputs.compiler_field("version").unwrap_or(""),
            outs.join(", "),
            keys::short(key),
            b.duration_ms,
        );
    }
    let _ = writeln!(s);
}

/// The Python environment a result ran in, as pip's requirements (`NAME==VERSION`, one a
/// line, sorted), from its fingerprint's `python.dist`: `pip install -r` recreates it.
/// Entries whose name or version holds anything but the characters of Python package names
/// and versions are left out (a fingerprint is another machine's file).
pub fn python_requirements(
    fingerprint: &Option<crate::foundation::fingerprint::Fingerprint>,
) -> Option<String> {
    let safe = |s: &str| {
        !s.is_empty()
            && s.len() <= 100
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '!'))
    };
    let mut lines: Vec<String> = fingerprint
        .as_ref()?
        .python_dists()
        .filter(|(name, v)| safe(name) && safe(v))
        .map(|(name, v)| format!("{name}=={v}"))
        .collect();
    if lines.is_empty() {
        return None;
    }
    lines.sort();
    Some(lines.join("\n") + "\n")
}

impl crate::foundation::error::Diagnose for BundleError {
    fn exit_code(&self) -> u8 {
        match self {
            BundleError::Store(s) => s.exit_code(),
            BundleError::Source { .. } => crate::foundation::exit::IO,
            BundleError::InvalidRecord { .. } => crate::foundation::exit::MISMATCH,
            _ => crate::foundation::exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            BundleError::MissingCommit { .. } => {
                Some("fetch the commit, or bundle from the clone that recorded it".into())
            }
            BundleError::NoCommit { .. } => {
                Some("record results inside a git repository to bundle them".into())
            }
            BundleError::Store(s) => s.hint(),
            BundleError::InvalidRecord { .. } => {
                Some("the record was edited or damaged; nothing was built or run from it".into())
            }
            BundleError::Dirty { .. } => Some(
                "commit the changes and build again; that build can be bundled and replayed".into(),
            ),
            BundleError::Source { .. } => {
                Some("a partial clone lacks the blob: fetch it (`git fetch --refetch`)".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture profile, and its ID (the hash of its content).
    fn profile() -> (String, Value) {
        let v: Value =
            serde_json::from_str(include_str!("../../tests/fixtures/records/profile.json"))
                .unwrap();
        (keys::key_of(&v), v)
    }

    /// A profile read from a bundle is hostile: an edited metric (whatever seal it carries)
    /// no longer hashes to its ID; a forged build key, recipe path or report digest is named
    /// even when the ID was recomputed to match.
    #[test]
    fn profiles_from_bundles_are_checked() {
        let (id, v) = profile();
        assert!(validate_profile(&id, &v).is_ok());
        let mut edited = v.clone();
        let m = edited["metrics"].as_object_mut().unwrap();
        let first = m.keys().next().unwrap().clone();
        m[&first]["value"] = serde_json::json!(1e300);
        let e = validate_profile(&id, &edited).unwrap_err().to_string();
        assert!(e.contains("does not hash to the profile's ID"), "{e}");
        for (field, value, says) in [
            ("build-key", serde_json::json!("../../etc"), "build-key"),
            (
                "recipe-path",
                serde_json::json!("/etc/passwd"),
                "recipe-path",
            ),
            ("commit", serde_json::json!("HEAD"), "commit"),
        ] {
            let mut forged = v.clone();
            forged[field] = value;
            let id = keys::key_of(&forged);
            let e = validate_profile(&id, &forged).unwrap_err().to_string();
            assert!(e.contains(says), "{field}: {e}");
        }
        let mut forged = v.clone();
        forged["outputs"]["ncu-rep"]["sha256"] = serde_json::json!("../x");
        let id = keys::key_of(&forged);
        let e = validate_profile(&id, &forged).unwrap_err().to_string();
        assert!(e.contains("outputs"), "{e}");
        assert!(validate_profile("not-a-key", &v).is_err());
    }
}
