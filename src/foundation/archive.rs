//! Bundle archives: the `.tar.zst` files that carry benchmark results alongside a paper.
//!
//! A bundle is a zstd-compressed tar of regular files whose last member, `MANIFEST`, lists
//! the sha256 of every other member. Bundles are written deterministically (sorted members,
//! zeroed ownership and times, fixed compression settings) so that the same results always
//! give the same bytes and the same digest, which is what a paper cites. Reading treats
//! every bundle as hostile: only regular files with safe relative paths are accepted, the
//! whole stream is checked before anything is returned, and nothing touches the disk
//! except through [`extract`], which validates the complete bundle before writing a file.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::foundation::fsutil;

/// One file of a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The file's path inside the bundle: relative and `/`-separated.
    pub path: String,
    /// The file's contents.
    pub bytes: Vec<u8>,
    /// Whether the file is executable (mode 0o755 rather than 0o644).
    pub executable: bool,
}

/// The manifest's name inside the bundle.
pub const MANIFEST: &str = "MANIFEST";

/// zstd level for bundles: slow, but bundles are written once and downloaded many times.
const ZSTD_LEVEL: i32 = 19;

/// How much of a bundle a reader accepts: a few kilobytes of zstd can claim gigabytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Total uncompressed bytes (the tar stream).
    pub max_bytes: u64,
    /// Members, MANIFEST included.
    pub max_entries: usize,
}

/// Default [`Limits::max_bytes`]: 1 GiB (`REPRO_BUNDLE_MAX_BYTES` overrides).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Default [`Limits::max_entries`]: 100,000 (`REPRO_BUNDLE_MAX_ENTRIES` overrides).
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: DEFAULT_MAX_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
        }
    }
}

impl Limits {
    /// The defaults, or `REPRO_BUNDLE_MAX_BYTES` / `REPRO_BUNDLE_MAX_ENTRIES` where set
    /// (whole numbers; anything else is an error naming the variable).
    pub fn from_env() -> Result<Self, ArchiveError> {
        use crate::foundation::limits;
        let d = Limits::default();
        Ok(Limits {
            max_bytes: limits::from_env("REPRO_BUNDLE_MAX_BYTES", d.max_bytes)?,
            max_entries: usize::try_from(limits::from_env(
                "REPRO_BUNDLE_MAX_ENTRIES",
                d.max_entries as u64,
            )?)
            .unwrap_or(usize::MAX),
        })
    }
}

/// Why a bundle could not be written, read, verified or extracted.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The file could not be read.
    #[error("cannot read {}", .path.display())]
    Read {
        /// The file being read.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("cannot write {}", .path.display())]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a well-formed bundle: a truncated or corrupt zstd stream, a bad tar
    /// header, a missing or malformed MANIFEST.
    #[error("{} is not a readable bundle: {reason}", .path.display())]
    Corrupt {
        /// The bundle.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A member's path is absolute, empty or climbs out with `..`.
    #[error("{} holds an unsafe path `{entry}`", .path.display())]
    UnsafePath {
        /// The bundle (being written, read or extracted).
        path: PathBuf,
        /// The offending member's path, lossily decoded.
        entry: String,
    },
    /// A member is not a regular file (a symbolic or hard link, a directory, a device, a
    /// FIFO...).
    #[error("{} holds `{entry}`, a {kind}, where a bundle holds only regular files", .path.display())]
    NotAFile {
        /// The bundle.
        path: PathBuf,
        /// The member's path.
        entry: String,
        /// What it is instead.
        kind: String,
    },
    /// Two members share a path (or one is named like the manifest).
    #[error("bundle entry `{entry}` is given twice")]
    Duplicate {
        /// The repeated path.
        entry: String,
    },
    /// One member's path lies under another's: a path cannot be both a file and a
    /// directory (`a` and `a/b`, or `MANIFEST` and `MANIFEST/x`).
    #[error("bundle entry `{entry}` lies under entry `{file}`, which is a file")]
    Clash {
        /// The member under the other.
        entry: String,
        /// The member that is a file where a directory would be.
        file: String,
    },
    /// The bundle unpacks to more than the reader accepts.
    #[error("{} is larger than allowed: {what}", .path.display())]
    TooLarge {
        /// The bundle.
        path: PathBuf,
        /// Which limit, and its value.
        what: String,
    },
    /// The output path cannot be written (it exists, or it is a dangling link).
    #[error(transparent)]
    Output(fsutil::WriteError),
    /// A `REPRO_BUNDLE_MAX_*` limit that is not a number.
    #[error(transparent)]
    Limit(#[from] crate::foundation::limits::LimitError),
}

/// Whether `p` is a path that can be extracted under a directory without leaving it.
///
/// Stricter than needed on purpose: `.`, empty components (`a//b`, `a/`) and control
/// characters are refused too, because they make two spellings of one file possible or
/// break the line-based MANIFEST. Backslashes and a leading drive (`C:`) are refused so
/// that a bundle cannot escape when extracted on a system where they make a path absolute
/// or separate its components.
fn is_safe(p: &str) -> bool {
    let drive = matches!(p.as_bytes(), [letter, b':', ..] if letter.is_ascii_alphabetic());
    !p.is_empty()
        && !drive
        && !p.chars().any(|c| c.is_control() || c == '\\')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn corrupt(path: &Path, reason: impl Into<String>) -> ArchiveError {
    ArchiveError::Corrupt {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// A tar header that depends on nothing but the member's size and mode.
fn header(size: u64, executable: bool) -> tar::Header {
    // GNU everywhere: the crate emits GNU long-name records for paths over 100 bytes, so
    // a GNU header for every member keeps the format consistent. `new_gnu` starts zeroed,
    // which already gives empty user and group names and device numbers 0.
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(size);
    h.set_mode(if executable { 0o755 } else { 0o644 });
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h
}

/// Writes a deterministic `.tar.zst`: entries sorted by path, then MANIFEST (one line per
/// file, `<sha256 hex>  <path>`, sorted by path) as the last member. Every header has
/// mtime 0, uid/gid 0, empty user and group names and mode 0o644 (0o755 when executable);
/// compression is zstd level 19 on one thread. The same entries give byte-identical files
/// whatever order they come in. Unsafe or repeated paths are refused before anything is
/// written; the file is replaced atomically. Returns the sha256 hex of the written file.
pub fn write(path: &Path, entries: Vec<Entry>) -> Result<String, ArchiveError> {
    write_with(path, entries, true, &|_, _| {})
}

/// [`write`], calling `progress(done, total)` with the bytes of the tar compressed so far
/// (compression is the slow part: zstd level 19 on one thread). Without `overwrite` an
/// existing file is never replaced, even one another process creates meanwhile (the bundle
/// is published with a no-clobber link, not a check then a rename):
/// [`fsutil::WriteError::Exists`].
pub fn write_with(
    path: &Path,
    mut entries: Vec<Entry>,
    overwrite: bool,
    progress: &dyn Fn(u64, u64),
) -> Result<String, ArchiveError> {
    let write_err = |source| ArchiveError::Write {
        path: path.to_owned(),
        source,
    };
    let mut seen = BTreeSet::new();
    for e in &entries {
        if !is_safe(&e.path) {
            return Err(ArchiveError::UnsafePath {
                path: path.to_owned(),
                entry: e.path.clone(),
            });
        }
        // The manifest is generated here; a caller's file of that name would shadow it.
        if e.path == MANIFEST || !seen.insert(e.path.as_str()) {
            return Err(ArchiveError::Duplicate {
                entry: e.path.clone(),
            });
        }
    }
    // Byte order of the UTF-8 path: locale-independent, so the bundle is too.
    entries.sort_by(|a, b| a.path.cmp(&b.path));

    let mut manifest = String::new();
    for e in &entries {
        manifest.push_str(&format!("{}  {}\n", sha256_hex(&e.bytes), e.path));
    }

    let mut tar = tar::Builder::new(Vec::new());
    let members = entries
        .iter()
        .map(|e| (e.path.as_str(), e.bytes.as_slice(), e.executable))
        .chain(std::iter::once((MANIFEST, manifest.as_bytes(), false)));
    for (name, bytes, executable) in members {
        let mut h = header(bytes.len() as u64, executable);
        tar.append_data(&mut h, name, bytes).map_err(write_err)?;
    }
    let tar = tar.into_inner().map_err(write_err)?;

    // A streaming encoder with no pledged size: zstd then picks its parameters from the
    // level alone, not from the input's size, and writes no content-size field. The
    // checksum lets a reader tell a damaged bundle from a valid one.
    let mut enc = zstd::Encoder::new(Vec::new(), ZSTD_LEVEL).map_err(write_err)?;
    enc.include_checksum(true).map_err(write_err)?;
    enc.include_contentsize(false).map_err(write_err)?;
    let total = tar.len() as u64;
    let mut done = 0u64;
    for chunk in tar.chunks(1 << 20) {
        enc.write_all(chunk).map_err(write_err)?;
        done += chunk.len() as u64;
        progress(done, total);
    }
    let compressed = enc.finish().map_err(write_err)?;

    fsutil::write_output(path, &compressed, overwrite).map_err(|e| match e {
        fsutil::WriteError::Io { source, .. } => write_err(source),
        other => ArchiveError::Output(other),
    })?;
    Ok(sha256_hex(&compressed))
}

/// Reads every member (MANIFEST included) with strict checks: only regular files, every
/// path safe and given once, a MANIFEST present; a truncated or corrupt stream is
/// [`ArchiveError::Corrupt`]. Never extracts anything to disk.
///
/// Reading is bounded by [`Limits::from_env`]: more uncompressed bytes or more members than
/// allowed is [`ArchiveError::TooLarge`], found before the excess is held in memory.
pub fn read(path: &Path) -> Result<Vec<Entry>, ArchiveError> {
    read_with(path, Limits::from_env()?)
}

/// [`read`] with explicit limits.
pub fn read_with(path: &Path, limits: Limits) -> Result<Vec<Entry>, ArchiveError> {
    read_progress(path, limits, &|_, _| {})
}

/// Counts the bytes read through it and reports them with the total.
struct Counting<'a, R> {
    inner: R,
    done: u64,
    total: u64,
    progress: &'a dyn Fn(u64, u64),
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.done += n as u64;
        (self.progress)(self.done, self.total);
        Ok(n)
    }
}

/// [`read_with`], calling `progress(done, total)` with the compressed bytes read so far.
/// Every member is held in memory: for tests and small bundles. [`verify_with`],
/// [`scan`] and [`extract`] stream instead.
pub fn read_progress(
    path: &Path,
    limits: Limits,
    progress: &dyn Fn(u64, u64),
) -> Result<Vec<Entry>, ArchiveError> {
    let mut out = Vec::new();
    stream(path, limits, progress, &mut |name, executable, member| {
        let mut bytes = Vec::new();
        member
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::Read(name.to_string(), e))?;
        out.push(Entry {
            path: name.to_string(),
            bytes,
            executable,
        });
        Ok(())
    })?;
    Ok(out)
}

/// Refuses to give more than `left` bytes of the decompressed stream, and says so through
/// `over` (the tar reader wraps the error it sees in its own).
struct Bounded<R> {
    inner: R,
    left: u64,
    over: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            // At the limit: one byte more means the stream is larger than allowed.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.over.set(true);
                    Err(std::io::Error::other("the bundle unpacks past the limit"))
                }
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Why a visitor of [`stream`] stopped.
enum Failure {
    /// Reading a member's bytes failed (the stream is damaged, or over the limit).
    Read(String, std::io::Error),
    /// The visitor's own error.
    Archive(ArchiveError),
}

impl From<ArchiveError> for Failure {
    fn from(e: ArchiveError) -> Self {
        Failure::Archive(e)
    }
}

type Visit<'v> = dyn FnMut(&str, bool, &mut dyn Read) -> Result<(), Failure> + 'v;

/// Reads the bundle once, front to back, in bounded memory: every member's header is
/// checked (a regular file, a safe path, given once, within the member limit) before
/// `visit(name, executable, bytes)` is called on it, and after the tar's end the rest of
/// the zstd stream is read to its end, so that a damaged tail or checksum is still found.
/// At most [`Limits::max_bytes`] of decompressed stream are read, whatever it claims.
fn stream(
    path: &Path,
    limits: Limits,
    progress: &dyn Fn(u64, u64),
    visit: &mut Visit<'_>,
) -> Result<(), ArchiveError> {
    // A regular file only: a FIFO would hang the read, a directory fail it half-way.
    let file = fsutil::open_input(path).map_err(|source| ArchiveError::Read {
        path: path.to_owned(),
        source,
    })?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let file = Counting {
        inner: std::io::BufReader::new(file),
        done: 0,
        total,
        progress,
    };
    let over = std::rc::Rc::new(std::cell::Cell::new(false));
    let too_large = || ArchiveError::TooLarge {
        path: path.to_owned(),
        what: format!(
            "it unpacks to more than {} bytes (REPRO_BUNDLE_MAX_BYTES)",
            limits.max_bytes
        ),
    };
    // An error met anywhere is the limit's if the limit was passed, else damage.
    let damaged = |what: String| {
        if over.get() {
            too_large()
        } else {
            corrupt(path, what)
        }
    };
    let decoder = zstd::Decoder::new(file).map_err(|e| damaged(format!("bad zstd stream: {e}")))?;
    let mut archive = tar::Archive::new(Bounded {
        inner: decoder,
        left: limits.max_bytes,
        over: over.clone(),
    });
    let mut seen = BTreeSet::new();
    let mut declared = 0u64;
    {
        let members = archive
            .entries()
            .map_err(|e| damaged(format!("bad tar stream: {e}")))?;
        for member in members {
            if seen.len() >= limits.max_entries {
                return Err(ArchiveError::TooLarge {
                    path: path.to_owned(),
                    what: format!(
                        "it has more than {} members (REPRO_BUNDLE_MAX_ENTRIES)",
                        limits.max_entries
                    ),
                });
            }
            let mut member = member.map_err(|e| damaged(format!("bad tar header: {e}")))?;
            let name = member_name(path, &member, &mut seen)?;
            let mode = member
                .header()
                .mode()
                .map_err(|e| corrupt(path, format!("bad mode for `{name}`: {e}")))?;
            // A member that says it is larger than what is left of the limit is refused
            // before its bytes are read (and hashed): a bomb is found at its header.
            declared = declared.saturating_add(member.header().size().unwrap_or(u64::MAX));
            if declared > limits.max_bytes {
                return Err(too_large());
            }
            match visit(&name, mode & 0o111 != 0, &mut member) {
                Ok(()) => {}
                Err(Failure::Archive(e)) => return Err(e),
                Err(Failure::Read(name, e)) => {
                    return Err(damaged(format!("cannot read `{name}`: {e}")));
                }
            }
        }
    }
    // The tar ends before the zstd frame does: read to the frame's end (and its checksum).
    // What follows the end-of-archive blocks must be zeros (a writer's padding to its
    // record size): anything else is data no verification covers, such as a second
    // archive appended (or a second zstd frame: the decoder reads on into it).
    after_the_end(archive.into_inner(), path, &damaged)?;
    if !seen.contains(MANIFEST) {
        return Err(corrupt(path, format!("no {MANIFEST}")));
    }
    Ok(())
}

/// The most zero padding read after a tar's end-of-archive blocks: tar pads to its record
/// size (10 KiB by default, 20 blocks), so 1 MiB is generous, and a stream of zeros up to the
/// bundle's size limit is not read to its end.
const MAX_PADDING: u64 = 1 << 20;

/// Reads the decompressed stream after the tar's end to the end of the zstd stream: zeros
/// only, at most [`MAX_PADDING`] of them.
fn after_the_end(
    rest: impl Read,
    path: &Path,
    damaged: &dyn Fn(String) -> ArchiveError,
) -> Result<(), ArchiveError> {
    let mut rest = rest.take(MAX_PADDING + 1);
    let mut buf = [0u8; 8192];
    let mut read = 0u64;
    loop {
        let n = match rest.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(damaged(format!("bad zstd stream after the archive: {e}"))),
        };
        if let Some(at) = buf[..n].iter().position(|&b| b != 0) {
            return Err(corrupt(
                path,
                format!(
                    "data after the archive's end-of-archive marker (byte {} past it is not \
                     padding: another archive or other bytes appended?)",
                    read + at as u64
                ),
            ));
        }
        read += n as u64;
    }
    if read > MAX_PADDING {
        return Err(corrupt(
            path,
            format!("more than {MAX_PADDING} bytes of padding after the archive's end"),
        ));
    }
    Ok(())
}

/// A member's name, once it is a safe relative path of a regular file, not seen before
/// and not clashing with one seen (which it joins).
fn member_name<R: std::io::Read>(
    path: &Path,
    member: &tar::Entry<'_, R>,
    seen: &mut BTreeSet<String>,
) -> Result<String, ArchiveError> {
    // `path_bytes` already folds in GNU long names and PAX path records.
    let raw = member.path_bytes().into_owned();
    let name = String::from_utf8(raw).map_err(|e| ArchiveError::UnsafePath {
        path: path.to_owned(),
        entry: String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })?;
    let kind = member.header().entry_type();
    // tar writes a directory's name with a trailing `/`: what it is, not where it leads,
    // is what is wrong with it (below).
    let bare = match kind {
        tar::EntryType::Directory => name.strip_suffix('/').unwrap_or(&name),
        _ => &name,
    };
    if !is_safe(bare) {
        return Err(ArchiveError::UnsafePath {
            path: path.to_owned(),
            entry: name,
        });
    }
    if !kind.is_file() {
        use tar::EntryType as T;
        let kind = match kind {
            T::Symlink => "symbolic link",
            T::Link => "hard link",
            T::Directory => "directory",
            T::Char | T::Block => "device",
            T::Fifo => "FIFO",
            _ => "member of another type",
        };
        return Err(ArchiveError::NotAFile {
            path: path.to_owned(),
            entry: name,
            kind: kind.into(),
        });
    }
    if !seen.insert(name.clone()) {
        return Err(ArchiveError::Duplicate { entry: name });
    }
    if let Some(e) = clash(seen, &name) {
        return Err(e);
    }
    Ok(name)
}

/// The most MANIFEST may hold: 100,000 members' lines are about 15 MB.
const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Reads a member to its end through sha256, copying its bytes to `to`; returns the digest
/// and the size.
fn hash_member(
    name: &str,
    member: &mut dyn Read,
    to: &mut dyn Write,
) -> Result<(String, u64), Failure> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = match member.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failure::Read(name.to_string(), e)),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
        to.write_all(&buf[..n])
            .map_err(|e| Failure::Read(name.to_string(), e))?;
    }
    Ok((hex::encode(hasher.finalize()), size))
}

/// Reads MANIFEST's bytes, bounded.
fn read_manifest(path: &Path, member: &mut dyn Read) -> Result<Vec<u8>, Failure> {
    let mut bytes = Vec::new();
    member
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::Read(MANIFEST.to_string(), e))?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(corrupt(
            path,
            format!("{MANIFEST} is larger than {MAX_MANIFEST_BYTES} bytes"),
        )
        .into());
    }
    Ok(bytes)
}

/// What [`verify`] found.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Verification {
    /// How many files MANIFEST lists.
    pub files: usize,
    /// Files listed and present whose sha256 differs from MANIFEST's, sorted.
    pub differs: Vec<String>,
    /// Files listed but absent, sorted.
    pub missing: Vec<String>,
    /// Files present but not listed (MANIFEST itself excluded), sorted.
    pub extra: Vec<String>,
}

impl Verification {
    /// Whether every listed file is present and intact, and nothing else is there.
    pub fn ok(&self) -> bool {
        self.differs.is_empty() && self.missing.is_empty() && self.extra.is_empty()
    }
}

/// Parses MANIFEST into path → sha256 hex, strictly: a malformed line is corruption,
/// not something to skip, since a skipped line would hide a file from verification.
fn parse_manifest(path: &Path, bytes: &[u8]) -> Result<BTreeMap<String, String>, ArchiveError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| corrupt(path, format!("{MANIFEST} is not UTF-8")))?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(corrupt(
            path,
            format!("{MANIFEST} does not end with a newline"),
        ));
    }
    let mut listed = BTreeMap::new();
    for (i, line) in text.split_terminator('\n').enumerate() {
        let bad = || corrupt(path, format!("malformed {MANIFEST} line {}", i + 1));
        let (digest, file) = line.split_once("  ").ok_or_else(bad)?;
        let hex_ok = digest.len() == 64
            && digest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex_ok || !is_safe(file) || file == MANIFEST {
            return Err(bad());
        }
        if listed.insert(file.to_owned(), digest.to_owned()).is_some() {
            return Err(corrupt(
                path,
                format!("{MANIFEST} lists `{file}` twice (line {})", i + 1),
            ));
        }
    }
    Ok(listed)
}

/// Re-hashes every member against MANIFEST.
pub fn verify(path: &Path) -> Result<Verification, ArchiveError> {
    verify_with(path, &|_, _| {})
}

/// [`verify`], calling `progress(done, total)` with the compressed bytes read so far.
pub fn verify_with(path: &Path, progress: &dyn Fn(u64, u64)) -> Result<Verification, ArchiveError> {
    Ok(scan(path, progress, None)?.verification)
}

/// What one streaming pass over a bundle found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scan {
    /// Every member against MANIFEST.
    pub verification: Verification,
    /// Every member (MANIFEST included) with its size, in bundle order.
    pub members: Vec<(String, u64)>,
    /// The first [`SCAN_KEEP_BYTES`] of the member asked for, if there is one.
    pub kept: Option<Vec<u8>>,
    /// Every member's sha256 as read (MANIFEST excluded), by path.
    pub digests: BTreeMap<String, String>,
}

/// How much of one member [`scan`] keeps.
pub const SCAN_KEEP_BYTES: u64 = 1 << 20;

/// Reads the bundle once in bounded memory: hashes every member while reading it, checks
/// them against MANIFEST, lists them, and keeps the first [`SCAN_KEEP_BYTES`] of the
/// member named `keep` (a README to show).
pub fn scan(
    path: &Path,
    progress: &dyn Fn(u64, u64),
    keep: Option<&str>,
) -> Result<Scan, ArchiveError> {
    let mut nothing = |_: &str, _: Option<&[u8]>| {};
    let mut whole = Whole {
        wanted: &|_| false,
        max: 0,
        visit: &mut nothing,
    };
    scan_with(path, progress, keep, &mut whole)
}

/// The members [`scan_with`] hands over whole, each as it is read: those `wanted` picks,
/// whole where at most `max` bytes, else `None` (too large to read).
pub struct Whole<'w> {
    /// Which members, by path.
    pub wanted: &'w dyn Fn(&str) -> bool,
    /// The most bytes one may have.
    pub max: u64,
    /// Called with each wanted member's path and bytes.
    pub visit: &'w mut dyn FnMut(&str, Option<&[u8]>),
}

/// [`scan`], handing the members `whole` picks to its visitor as they are read (records
/// to check, in the same single pass).
pub fn scan_with(
    path: &Path,
    progress: &dyn Fn(u64, u64),
    keep: Option<&str>,
    whole: &mut Whole<'_>,
) -> Result<Scan, ArchiveError> {
    let mut digests = BTreeMap::new();
    let mut manifest = None;
    let mut out = Scan::default();
    stream(
        path,
        Limits::from_env()?,
        progress,
        &mut |name, _, member| {
            if name == MANIFEST {
                let bytes = read_manifest(path, member)?;
                out.members.push((name.to_string(), bytes.len() as u64));
                manifest = Some(bytes);
                return Ok(());
            }
            let (digest, size) = if keep == Some(name) {
                let mut head = Vec::new();
                let mut limited = LimitedVec(&mut head, SCAN_KEEP_BYTES as usize);
                let r = hash_member(name, member, &mut limited)?;
                out.kept = Some(head);
                r
            } else if (whole.wanted)(name) {
                let cap = usize::try_from(whole.max.saturating_add(1)).unwrap_or(usize::MAX);
                let mut bytes = Vec::new();
                let r = hash_member(name, member, &mut LimitedVec(&mut bytes, cap))?;
                (whole.visit)(name, (r.1 <= whole.max).then_some(&bytes[..]));
                r
            } else {
                hash_member(name, member, &mut std::io::sink())?
            };
            out.members.push((name.to_string(), size));
            digests.insert(name.to_string(), digest);
            Ok(())
        },
    )?;
    let manifest = manifest.ok_or_else(|| corrupt(path, format!("no {MANIFEST}")))?;
    out.verification = compare(path, &manifest, &digests)?;
    out.digests = digests;
    Ok(out)
}

/// A writer into a vector that keeps only the first `.1` bytes.
struct LimitedVec<'a>(&'a mut Vec<u8>, usize);

impl Write for LimitedVec<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.1.saturating_sub(self.0.len());
        self.0.extend_from_slice(&buf[..buf.len().min(room)]);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The members' digests (path → sha256 hex, MANIFEST excluded) against MANIFEST's text.
fn compare(
    path: &Path,
    manifest: &[u8],
    present: &BTreeMap<String, String>,
) -> Result<Verification, ArchiveError> {
    let listed = parse_manifest(path, manifest)?;
    let mut v = Verification {
        files: listed.len(),
        ..Verification::default()
    };
    // BTreeMap iteration keeps every list sorted.
    for (file, digest) in &listed {
        match present.get(file) {
            None => v.missing.push(file.clone()),
            Some(d) if d != digest => v.differs.push(file.clone()),
            Some(_) => {}
        }
    }
    v.extra = present
        .keys()
        .filter(|f| !listed.contains_key(*f))
        .cloned()
        .collect();
    Ok(v)
}

/// The error for a member that lies under another member (a file), or that another
/// already-seen member lies under, if either is so.
fn clash(seen: &BTreeSet<String>, name: &str) -> Option<ArchiveError> {
    let mut at = 0;
    while let Some(i) = name[at..].find('/') {
        let parent = &name[..at + i];
        if seen.contains(parent) {
            return Some(ArchiveError::Clash {
                entry: name.to_string(),
                file: parent.to_string(),
            });
        }
        at += i + 1;
    }
    let under = format!("{name}/");
    seen.range(under.clone()..)
        .next()
        .filter(|s| s.starts_with(&under))
        .map(|s| ArchiveError::Clash {
            entry: s.clone(),
            file: name.to_string(),
        })
}

/// Creates the directories above `entry` under `dest`, refusing to pass through anything
/// that is not a real directory: a symlink left in `dest` from elsewhere must not redirect
/// the extraction outside it.
fn make_parents(bundle: &Path, dest: &Path, entry: &str) -> Result<PathBuf, ArchiveError> {
    let mut dir = dest.to_path_buf();
    let mut parts: Vec<&str> = entry.split('/').collect();
    parts.pop();
    for part in parts {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ArchiveError::UnsafePath {
                    path: bundle.to_owned(),
                    entry: entry.to_owned(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&dir).map_err(|source| ArchiveError::Write {
                    path: dir.clone(),
                    source,
                })?;
            }
            Err(source) => return Err(ArchiveError::Read { path: dir, source }),
        }
    }
    Ok(dir)
}

/// Extracts every member (MANIFEST included) into `dest`, created if needed, refusing
/// unsafe paths, with mode 0o644 whatever the member's mode; returns the paths written, in
/// bundle order. See [`extract_verified`].
pub fn extract(path: &Path, dest: &Path) -> Result<Vec<String>, ArchiveError> {
    extract_verified(path, dest, &|_, _| {}).map(|(_, written)| written)
}

/// Extracts the bundle into `dest` in one streaming pass, hashing every member as it is
/// written, and returns the members against MANIFEST with the paths written. Memory stays
/// bounded whatever the bundle's size. A bad member anywhere (an unsafe path, a damaged
/// stream, a limit passed) stops it and removes everything it wrote, so nothing is left;
/// a member that differs from MANIFEST is reported in the [`Verification`], and the caller
/// must not use `dest` unless it is [`Verification::ok`].
pub fn extract_verified(
    path: &Path,
    dest: &Path,
    progress: &dyn Fn(u64, u64),
) -> Result<(Verification, Vec<String>), ArchiveError> {
    let existed = dest.exists();
    std::fs::create_dir_all(dest).map_err(|source| ArchiveError::Write {
        path: dest.to_owned(),
        source,
    })?;
    let mut written: Vec<String> = Vec::new();
    // Every member begun, so that a failure half-way removes its directories too.
    let mut touched: Vec<String> = Vec::new();
    let mut digests = BTreeMap::new();
    let mut manifest = None;
    let result = stream(
        path,
        Limits::from_env()?,
        progress,
        &mut |name, _, member| {
            touched.push(name.to_string());
            let dir = make_parents(path, dest, name)?;
            let target = dest.join(name);
            let write_err = |source| ArchiveError::Write {
                path: target.clone(),
                source,
            };
            // Written beside the target then renamed over it: the rename replaces whatever is
            // at the target (a symlink included) instead of writing through it.
            let mut tmp = tempfile::Builder::new()
                .prefix(".repro-tmp-")
                .tempfile_in(&dir)
                .map_err(write_err)?;
            if name == MANIFEST {
                let bytes = read_manifest(path, member)?;
                tmp.write_all(&bytes).map_err(write_err)?;
                manifest = Some(bytes);
            } else {
                let mut file = std::io::BufWriter::new(tmp.as_file_mut());
                let (digest, _) = hash_member(name, member, &mut file)?;
                file.flush().map_err(write_err)?;
                drop(file);
                digests.insert(name.to_string(), digest);
            }
            // Never executable, whatever the member's mode says: MANIFEST hashes content only,
            // so a mode is an unchecked claim, and an executable file from a stranger is one
            // step from running (`-ccbin ./x`, a `./script` in a command).
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644))
                .map_err(write_err)?;
            tmp.persist(&target).map_err(|err| write_err(err.error))?;
            written.push(name.to_string());
            Ok(())
        },
    );
    let verified = result.and_then(|()| {
        let manifest = manifest.ok_or_else(|| corrupt(path, format!("no {MANIFEST}")))?;
        compare(path, &manifest, &digests)
    });
    match verified {
        Ok(v) => Ok((v, written)),
        Err(e) => {
            remove_written(dest, &touched, existed);
            Err(e)
        }
    }
}

/// Removes the files an extraction wrote, then the directories that are left empty (and
/// `dest` itself when the extraction created it).
fn remove_written(dest: &Path, written: &[String], dest_existed: bool) {
    let mut dirs = BTreeSet::new();
    for w in written {
        let _ = std::fs::remove_file(dest.join(w));
        let mut p = Path::new(w.as_str());
        while let Some(parent) = p.parent().filter(|p| !p.as_os_str().is_empty()) {
            dirs.insert(parent.to_path_buf());
            p = parent;
        }
    }
    // Deepest first: a longer path sorts after its parent.
    for d in dirs.iter().rev() {
        let _ = std::fs::remove_dir(dest.join(d));
    }
    if !dest_existed {
        let _ = std::fs::remove_dir(dest);
    }
}

impl crate::foundation::error::Diagnose for ArchiveError {
    fn exit_code(&self) -> u8 {
        use ArchiveError as E;
        match self {
            // A bundle that is not there is the user's input mistake (2), as the README says.
            // A bundle that is not there, or not a regular file, is the user's input
            // mistake (2), as the README says.
            E::Read { source, .. } => fsutil::read_exit_code(source),
            E::Write { .. } => crate::foundation::exit::IO,
            // A repeated member comes from a hand-made (hostile) bundle, not from a bug.
            E::Corrupt { .. }
            | E::UnsafePath { .. }
            | E::NotAFile { .. }
            | E::Duplicate { .. }
            | E::Clash { .. } => crate::foundation::exit::MISMATCH,
            E::TooLarge { .. } => crate::foundation::exit::USAGE,
            E::Output(w) => crate::foundation::error::Diagnose::exit_code(w),
            E::Limit(e) => crate::foundation::error::Diagnose::exit_code(e),
        }
    }
    fn hint(&self) -> Option<String> {
        use ArchiveError as E;
        match self {
            E::Corrupt { .. } => Some("the file is truncated or not a repro bundle: download it again and compare its sha256".into()),
            E::UnsafePath { .. } => Some("the archive tries to write outside its directory: it was not made by repro; nothing was extracted".into()),
            E::NotAFile { kind, .. } if kind == "directory" => Some("repro writes bundles of regular files only, with no directory entries: repack an unpacked bundle with `tar --no-recursion` over its files (MANIFEST last), or make it again with `repro bundle create`; nothing was extracted".into()),
            E::NotAFile { .. } => Some("repro writes bundles of regular files only: this one was not made by repro; nothing was extracted".into()),
            E::Write { .. } => Some("check free space and permissions of the output directory".into()),
            E::Clash { .. } => Some("repro never writes a path both as a file and as a directory: the bundle was made or edited by hand; nothing was extracted".into()),
            E::Duplicate { .. } => Some("repro never writes a member twice: the bundle was edited by hand; nothing was extracted".into()),
            E::TooLarge { .. } => Some("if you trust this bundle, raise the limit with REPRO_BUNDLE_MAX_BYTES or REPRO_BUNDLE_MAX_ENTRIES".into()),
            E::Output(w) => crate::foundation::error::Diagnose::hint(w),
            E::Limit(e) => crate::foundation::error::Diagnose::hint(e),
            E::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Some("check the path of the bundle".into())
            }
            E::Read { source, .. } => Some(fsutil::read_hint(source).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, bytes: &[u8], executable: bool) -> Entry {
        Entry {
            path: path.to_owned(),
            bytes: bytes.to_vec(),
            executable,
        }
    }

    fn long_path() -> String {
        format!("results/{}/metrics.csv", "h200-sm90a-".repeat(12))
    }

    fn sample() -> Vec<Entry> {
        vec![
            entry(
                "results/h200/run-1/metrics.json",
                b"{\"gflops\": 812.5}\n",
                false,
            ),
            entry("bin/run.sh", b"#!/bin/sh\necho run\n", true),
            entry("empty.txt", b"", false),
            entry(&long_path(), b"n,ms\n1024,0.25\n", false),
            entry("README.md", b"# Results\n", false),
        ]
    }

    /// Rebuilds a bundle by hand from members in the order given, as a tamperer would.
    fn rebuild(path: &Path, members: &[Entry]) {
        let mut b = tar::Builder::new(Vec::new());
        for m in members {
            let mut h = header(m.bytes.len() as u64, m.executable);
            b.append_data(&mut h, &m.path, m.bytes.as_slice()).unwrap();
        }
        let tar = b.into_inner().unwrap();
        std::fs::write(path, zstd::encode_all(tar.as_slice(), 3).unwrap()).unwrap();
    }

    /// A bundle with one raw member: the name and type are written into the header
    /// directly, bypassing the tar crate's own refusal of `..` and absolute paths.
    fn hostile(path: &Path, name: &str, kind: tar::EntryType) {
        let mut h = tar::Header::new_gnu();
        let gnu = h.as_gnu_mut().unwrap();
        gnu.name[..name.len()].copy_from_slice(name.as_bytes());
        if kind == tar::EntryType::Symlink {
            let target = b"/etc/passwd";
            gnu.linkname[..target.len()].copy_from_slice(target);
        }
        h.set_entry_type(kind);
        h.set_mode(0o644);
        let data: &[u8] = if kind == tar::EntryType::Regular {
            b"gotcha\n"
        } else {
            b""
        };
        h.set_size(data.len() as u64);
        h.set_cksum();
        let mut b = tar::Builder::new(Vec::new());
        b.append(&h, data).unwrap();
        let mut m = header(0, false);
        b.append_data(&mut m, MANIFEST, &b""[..]).unwrap();
        let tar = b.into_inner().unwrap();
        std::fs::write(path, zstd::encode_all(tar.as_slice(), 3).unwrap()).unwrap();
    }

    #[test]
    fn reading_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("bomb.tar.zst");
        // 64 MiB of zeros compress to a few kilobytes.
        write(
            &bundle,
            vec![entry("zeros.bin", &vec![0u8; 64 << 20], false)],
        )
        .unwrap();
        assert!(std::fs::metadata(&bundle).unwrap().len() < 100_000);
        let small = Limits {
            max_bytes: 1 << 20,
            max_entries: 10,
        };
        assert!(matches!(
            read_with(&bundle, small),
            Err(ArchiveError::TooLarge { .. })
        ));
        let many: Vec<Entry> = (0..20)
            .map(|i| entry(&format!("f{i}"), b"", false))
            .collect();
        write(&bundle, many).unwrap();
        let err = read_with(&bundle, small).unwrap_err();
        assert!(err.to_string().contains("more than 10 members"), "{err}");
        assert_eq!(read_with(&bundle, Limits::default()).unwrap().len(), 21);
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b.tar.zst");
        let digest = write(&bundle, sample()).unwrap();
        assert_eq!(digest, sha256_hex(&std::fs::read(&bundle).unwrap()));

        let got = read(&bundle).unwrap();
        let mut want = sample();
        want.sort_by(|a, b| a.path.cmp(&b.path));
        let manifest = got.last().unwrap();
        assert_eq!(manifest.path, MANIFEST);
        assert_eq!(&got[..got.len() - 1], &want[..]);
        let text = std::str::from_utf8(&manifest.bytes).unwrap();
        assert_eq!(text.lines().count(), want.len());
        assert!(text.contains(&format!("{}  empty.txt\n", sha256_hex(b""))));

        let out = dir.path().join("out");
        let written = extract(&bundle, &out).unwrap();
        assert_eq!(written.len(), want.len() + 1);
        for e in &want {
            let p = out.join(&e.path);
            assert_eq!(std::fs::read(&p).unwrap(), e.bytes, "{}", e.path);
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            // A bundle never gives executable bits, whatever its members' modes say.
            assert_eq!(mode, 0o644, "{}", e.path);
        }
        assert!(out.join(long_path()).is_file());
        assert!(out.join(MANIFEST).is_file());
    }

    #[test]
    fn deterministic_whatever_the_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.tar.zst"), dir.path().join("b.tar.zst"));
        let mut reversed = sample();
        reversed.reverse();
        let da = write(&a, sample()).unwrap();
        let db = write(&b, reversed).unwrap();
        assert_eq!(da, db);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    }

    #[test]
    fn verify_finds_tampering() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b.tar.zst");
        write(&bundle, sample()).unwrap();
        let fresh = verify(&bundle).unwrap();
        assert!(fresh.ok(), "{fresh:?}");
        assert_eq!(fresh.files, sample().len());
        let original = read(&bundle).unwrap();

        let t = dir.path().join("changed.tar.zst");
        let mut members = original.clone();
        members[0].bytes.push(b'!');
        rebuild(&t, &members);
        let v = verify(&t).unwrap();
        assert_eq!(v.differs, vec![members[0].path.clone()]);
        assert!(v.missing.is_empty() && v.extra.is_empty() && !v.ok());

        let t = dir.path().join("removed.tar.zst");
        let mut members = original.clone();
        let gone = members.remove(1);
        rebuild(&t, &members);
        let v = verify(&t).unwrap();
        assert_eq!(v.missing, vec![gone.path]);
        assert!(v.differs.is_empty() && v.extra.is_empty() && !v.ok());

        let t = dir.path().join("added.tar.zst");
        let mut members = original;
        members.insert(0, entry("sneaky.bin", b"\x7fELF", true));
        rebuild(&t, &members);
        let v = verify(&t).unwrap();
        assert_eq!(v.extra, vec!["sneaky.bin".to_owned()]);
        assert!(v.differs.is_empty() && v.missing.is_empty() && !v.ok());
        assert_eq!(v.files, sample().len());
    }

    #[test]
    fn the_stream_is_checked_past_the_tar_end_while_streaming() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b.tar.zst");
        write(&bundle, sample()).unwrap();
        let good = std::fs::read(&bundle).unwrap();
        // The frame's checksum (its last 4 bytes) damaged: the tar inside reads whole, so
        // only reading the zstd frame to its end finds it.
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        std::fs::write(&bundle, &bad).unwrap();
        let out = dir.path().join("out");
        for err in [
            verify(&bundle).unwrap_err(),
            extract(&bundle, &out).unwrap_err(),
            scan(&bundle, &|_, _| {}, None).unwrap_err(),
        ] {
            assert!(matches!(err, ArchiveError::Corrupt { .. }), "{err}");
        }
        // Nothing was left of the extraction that failed at the end.
        assert!(!out.exists());
        // Bytes after the frame are refused too.
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"junk after the frame");
        std::fs::write(&bundle, &trailing).unwrap();
        assert!(matches!(verify(&bundle), Err(ArchiveError::Corrupt { .. })));
    }

    #[test]
    fn without_overwrite_exactly_one_of_concurrent_writers_publishes() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b.tar.zst");
        let outcomes: Vec<_> = std::thread::scope(|s| {
            let writers: Vec<_> = (0..4)
                .map(|_| s.spawn(|| write_with(&bundle, sample(), false, &|_, _| {})))
                .collect();
            writers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
        for e in outcomes.into_iter().filter_map(Result::err) {
            assert!(
                matches!(e, ArchiveError::Output(fsutil::WriteError::Exists { .. })),
                "{e}"
            );
        }
        assert!(verify(&bundle).unwrap().ok());
        // No temporary file of a loser is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// Compresses `tar` as one zstd frame, as a bundle is.
    fn zstd_of(tar: &[u8]) -> Vec<u8> {
        zstd::encode_all(tar, 3).unwrap()
    }

    #[test]
    fn anything_but_padding_after_the_tar_end_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b.tar.zst");
        write(&bundle, sample()).unwrap();
        let good = std::fs::read(&bundle).unwrap();
        let tar = zstd::decode_all(&good[..]).unwrap();
        let refused = |bytes: &[u8], what: &str| {
            std::fs::write(&bundle, bytes).unwrap();
            let out = dir.path().join("out");
            for err in [
                verify(&bundle).unwrap_err(),
                extract(&bundle, &out).unwrap_err(),
                scan(&bundle, &|_, _| {}, None).unwrap_err(),
            ] {
                assert!(matches!(err, ArchiveError::Corrupt { .. }), "{what}: {err}");
            }
            assert!(!out.exists(), "{what}");
        };
        // Another tar inside the same frame, after the end-of-archive blocks.
        refused(&zstd_of(&[&tar[..], &tar[..]].concat()), "a tar appended");
        refused(
            &zstd_of(&[&tar[..], b"random bytes"].concat()),
            "bytes appended",
        );
        // Two bundles concatenated: the decoder reads on into the second frame.
        refused(&[&good[..], &good[..]].concat(), "two bundles");
        // Zeros past the bound.
        let zeros = vec![0u8; (MAX_PADDING as usize) + 4096];
        refused(&zstd_of(&[&tar[..], &zeros[..]].concat()), "endless zeros");
        // Padding within the bound is a tar writer's record padding: accepted.
        let padded = zstd_of(&[&tar[..], &[0u8; 20 * 512][..]].concat());
        std::fs::write(&bundle, &padded).unwrap();
        assert!(verify(&bundle).unwrap().ok());
    }

    #[test]
    fn extract_verified_hashes_while_writing() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b.tar.zst");
        let mut entries = sample();
        write(&bundle, entries.clone()).unwrap();
        let (v, written) = extract_verified(&bundle, &dir.path().join("ok"), &|_, _| {}).unwrap();
        assert!(v.ok(), "{v:?}");
        assert_eq!(written.len(), entries.len() + 1);
        // A member edited after MANIFEST was written is found in the same pass.
        let good = read(&bundle).unwrap();
        let manifest = good.iter().find(|e| e.path == MANIFEST).unwrap().clone();
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        entries[0].bytes.push(b'!');
        let mut tar = tar::Builder::new(Vec::new());
        for e in entries.iter().chain(std::iter::once(&manifest)) {
            let mut h = header(e.bytes.len() as u64, false);
            tar.append_data(&mut h, &e.path, e.bytes.as_slice())
                .unwrap();
        }
        let z = zstd::encode_all(tar.into_inner().unwrap().as_slice(), 3).unwrap();
        std::fs::write(&bundle, z).unwrap();
        let (v, _) = extract_verified(&bundle, &dir.path().join("edited"), &|_, _| {}).unwrap();
        assert_eq!(v.differs, vec![entries[0].path.clone()]);
        let s = scan(&bundle, &|_, _| {}, Some(&entries[0].path)).unwrap();
        assert_eq!(s.verification, v);
        assert_eq!(s.kept.as_deref(), Some(entries[0].bytes.as_slice()));
    }

    #[test]
    fn truncated_or_random_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b.tar.zst");
        let mut entries = sample();
        // Enough incompressible-ish data that half the file cuts through a member.
        let noise: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        entries.push(entry("noise.bin", &noise, false));
        write(&bundle, entries).unwrap();
        let bytes = std::fs::read(&bundle).unwrap();
        std::fs::write(&bundle, &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(read(&bundle), Err(ArchiveError::Corrupt { .. })));
        assert!(matches!(verify(&bundle), Err(ArchiveError::Corrupt { .. })));

        let mut x = 0x2545_f491_4f6c_dd1du64;
        let random: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(&bundle, random).unwrap();
        assert!(matches!(read(&bundle), Err(ArchiveError::Corrupt { .. })));
        assert!(matches!(verify(&bundle), Err(ArchiveError::Corrupt { .. })));

        std::fs::write(&bundle, b"").unwrap();
        assert!(matches!(read(&bundle), Err(ArchiveError::Corrupt { .. })));
    }

    #[test]
    fn a_member_under_another_member_is_refused_by_verify() {
        // `a` then `a/b` (and the reverse order), and a member under MANIFEST: each passed
        // verify before and failed only at replay, with a hint about free space.
        let cases: [&[&str]; 3] = [&["a", "a/b"], &["a/b/c", "a/b"], &["MANIFEST/x"]];
        for names in cases {
            let dir = tempfile::tempdir().unwrap();
            let bundle = dir.path().join("b.tar.zst");
            let mut members: Vec<Entry> = names.iter().map(|n| entry(n, b"x", false)).collect();
            let manifest: String = members
                .iter()
                .map(|m| format!("{}  {}\n", sha256_hex(&m.bytes), m.path))
                .collect();
            members.push(entry(MANIFEST, manifest.as_bytes(), false));
            rebuild(&bundle, &members);
            let e = verify(&bundle).map(|_| ()).unwrap_err();
            assert!(matches!(e, ArchiveError::Clash { .. }), "{names:?}: {e}");
            let hint = crate::foundation::error::Diagnose::hint(&e).unwrap();
            assert!(!hint.contains("free space"), "{hint}");
            assert!(e.to_string().contains("lies under"), "{e}");
            assert!(extract(&bundle, &dir.path().join("out")).is_err());
        }
    }

    /// A directory entry, as plain `tar` writes one (`artifacts/`), is named for what it is,
    /// with a hint to repack without them; a `..` directory is still an unsafe path.
    #[test]
    fn a_directory_entry_is_named_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("plain.tar.zst");
        hostile(&bundle, "artifacts/", tar::EntryType::Directory);
        let e = verify(&bundle).map(|_| ()).unwrap_err();
        match &e {
            ArchiveError::NotAFile { entry, kind, .. } => {
                assert_eq!((entry.as_str(), kind.as_str()), ("artifacts/", "directory"))
            }
            other => panic!("{other}"),
        }
        let hint = crate::foundation::error::Diagnose::hint(&e).unwrap();
        assert!(hint.contains("--no-recursion"), "{hint}");
        hostile(&bundle, "../up/", tar::EntryType::Directory);
        let e = verify(&bundle).map(|_| ()).unwrap_err();
        assert!(matches!(e, ArchiveError::UnsafePath { .. }), "{e}");
    }

    #[test]
    fn hostile_members_are_refused() {
        let cases = [
            ("../escape.txt", tar::EntryType::Regular),
            ("/repro-archive-test-abs.txt", tar::EntryType::Regular),
            ("link", tar::EntryType::Symlink),
            ("hard", tar::EntryType::Link),
            ("dev", tar::EntryType::Char),
        ];
        for (name, kind) in cases {
            let dir = tempfile::tempdir().unwrap();
            let bundle = dir.path().join("evil.tar.zst");
            hostile(&bundle, name, kind);
            let unsafe_path = |r: &ArchiveError| match r {
                ArchiveError::UnsafePath { entry, .. } => entry == name,
                ArchiveError::NotAFile { entry, kind, .. } => {
                    entry == name && kind != "member of another type"
                }
                _ => false,
            };
            assert!(unsafe_path(&read(&bundle).unwrap_err()), "{name}");
            assert!(unsafe_path(&verify(&bundle).unwrap_err()), "{name}");
            let out = dir.path().join("out");
            assert!(unsafe_path(&extract(&bundle, &out).unwrap_err()), "{name}");
            assert!(!dir.path().join("escape.txt").exists());
            assert!(!Path::new("/repro-archive-test-abs.txt").exists());
            // Validation comes before any write, so not even `dest` is created.
            assert!(!out.exists(), "{name}");
        }
    }

    #[test]
    fn extract_does_not_follow_symlinks_in_dest() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b.tar.zst");
        write(&bundle, vec![entry("results/x.txt", b"x", false)]).unwrap();
        let out = dir.path().join("out");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, out.join("results")).unwrap();
        assert!(matches!(
            extract(&bundle, &out),
            Err(ArchiveError::UnsafePath { .. })
        ));
        assert!(!elsewhere.join("x.txt").exists());
    }

    #[test]
    fn write_refuses_bad_paths_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b.tar.zst");
        let dup = vec![entry("a.txt", b"1", false), entry("a.txt", b"2", false)];
        assert!(matches!(
            write(&bundle, dup),
            Err(ArchiveError::Duplicate { entry }) if entry == "a.txt"
        ));
        assert!(matches!(
            write(&bundle, vec![entry(MANIFEST, b"", false)]),
            Err(ArchiveError::Duplicate { .. })
        ));
        for bad in ["a/../b", "/abs", "", "a//b", "a/", "./a", "a\nb"] {
            assert!(
                matches!(
                    write(&bundle, vec![entry(bad, b"", false)]),
                    Err(ArchiveError::UnsafePath { entry, .. }) if entry == bad
                ),
                "{bad:?}"
            );
        }
        assert!(!bundle.exists());
    }

    /// Path forms that escape or alias on some platform: Windows separators, drives and
    /// UNC shares, absolute and parent paths, NUL and other control characters.
    #[test]
    fn platform_path_forms_are_refused() {
        for bad in [
            "a\\..\\b",
            "..\\escape.txt",
            "C:\\x",
            "C:/x",
            "c:x",
            "\\\\server\\share\\x",
            "\\x",
            "/etc/passwd",
            "//x",
            "..",
            "../x",
            "a/..",
            "a/../../x",
            ".",
            "a/./b",
            "a\0b",
            "a\tb",
            "a\rb",
            "",
        ] {
            assert!(!is_safe(bad), "{bad:?} is accepted");
        }
        for good in [
            "a",
            "a/b.txt",
            "a..b",
            "..a",
            "a..",
            ".hidden",
            "...",
            "x/C:y",
            "1:2",
            "source/kernels/k.cu",
        ] {
            assert!(is_safe(good), "{good:?} is refused");
        }
        // The same, through a real archive: refused on read before anything is written.
        for bad in ["a\\..\\b", "C:\\x", "\\\\server\\share\\x", "C:/x"] {
            let dir = tempfile::tempdir().unwrap();
            let bundle = dir.path().join("evil.tar.zst");
            hostile(&bundle, bad, tar::EntryType::Regular);
            assert!(
                matches!(read(&bundle), Err(ArchiveError::UnsafePath { entry, .. }) if entry == bad),
                "{bad:?}"
            );
            let out = dir.path().join("out");
            assert!(extract(&bundle, &out).is_err(), "{bad:?}");
            assert!(!out.exists(), "{bad:?}");
        }
    }
}
