//! Host probes: OS, kernel, CPU, memory and virtualisation from files, and host tool
//! versions from their `--version` (each in its own thread, with a short timeout).

use std::time::Duration;

use crate::foundation::fields::{Field, Fields};
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::version::version_token;

/// How long one `--version` may take before it is given up on.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(3);

/// Probes the host from `/etc/os-release`, `/proc` and `/sys`.
pub fn probe() -> Fields {
    let mut f = Fields::new();
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let put = |f: &mut Fields, k: &str, v: Option<String>, why: &str| {
        f.insert(
            format!("host.{k}"),
            v.map_or_else(|| Field::Unavailable(why.into()), Field::Value),
        );
    };
    let os = read("/etc/os-release").and_then(|t| os_release_name(&t));
    put(&mut f, "os", os, "no /etc/os-release");
    put(
        &mut f,
        "kernel",
        read("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()),
        "no /proc",
    );
    f.insert(
        "host.arch".into(),
        Field::Value(std::env::consts::ARCH.into()),
    );
    let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string());
    put(&mut f, "cpu", cpu, "no model name in /proc/cpuinfo");
    let cores = std::thread::available_parallelism()
        .ok()
        .map(|n| n.to_string());
    put(&mut f, "cores", cores, "unknown");
    let mem = read("/proc/meminfo").and_then(|t| {
        let kib: u64 = t
            .lines()
            .find(|l| l.starts_with("MemTotal:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some((kib / 1024).to_string())
    });
    put(&mut f, "memory-mib", mem, "no MemTotal in /proc/meminfo");
    let virt = virtualization(
        &cpuinfo,
        read("/sys/class/dmi/id/sys_vendor").as_deref(),
        read("/sys/class/dmi/id/product_name").as_deref(),
        read("/proc/1/cgroup").as_deref(),
        std::path::Path::new("/.dockerenv").exists()
            || std::path::Path::new("/run/.containerenv").exists(),
    );
    f.insert("host.virtualization".into(), Field::Value(virt));
    f
}

fn os_release_name(text: &str) -> Option<String> {
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(|v| v.trim().trim_matches('"').to_string())
    };
    get("PRETTY_NAME").or_else(|| get("NAME"))
}

/// Describes the virtualisation layer: `none`, `vm (VENDOR PRODUCT)`, `container (KIND)`,
/// or both joined by `, `.
pub fn virtualization(
    cpuinfo: &str,
    vendor: Option<&str>,
    product: Option<&str>,
    cgroup: Option<&str>,
    container_marker: bool,
) -> String {
    let mut parts = Vec::new();
    let hypervisor = cpuinfo
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|w| w == "hypervisor"));
    if hypervisor {
        let who: Vec<&str> = [vendor, product]
            .into_iter()
            .flatten()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        parts.push(if who.is_empty() {
            "vm".to_string()
        } else {
            format!("vm ({})", who.join(" "))
        });
    }
    let cg = cgroup.unwrap_or_default();
    let kind = ["kubepods", "docker", "containerd", "lxc", "podman"]
        .into_iter()
        .find(|k| cg.contains(k));
    match (kind, container_marker) {
        (Some(k), _) => parts.push(format!("container ({k})")),
        (None, true) => parts.push("container".into()),
        _ => {}
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// `TOOL --version`'s answer, from a cache when the same compiler binary answered before.
///
/// Starting `gcc --version` costs a few milliseconds, as much as the rest of `env check` on
/// a machine without a GPU. A host compiler's version is a property of its binary, so the
/// answer is cached under the binary the PATH finds (its path, the file it resolves to, and
/// that file's size, modification time and inode). Only gcc, g++ and clang are cached, and
/// only when the PATH finds the compiler itself: a wrapper (ccache) or a proxy (rustup's
/// `rustc` and `cargo`, pyenv's `python3`) answers for whatever it chooses at the time.
pub fn probe_tool_cached(key: &'static str, tool: &'static str) -> Fields {
    let stamp = ["gcc", "g++", "clang"]
        .contains(&tool)
        .then(|| binary_stamp(tool))
        .flatten();
    let path = crate::foundation::fsutil::cache_dir().map(|d| d.join(format!("tool-{tool}.json")));
    let (Some(stamp), Some(path)) = (stamp, path) else {
        return probe_tool(key, tool);
    };
    if let Some(hit) = super::cuda::read_cache(&path, &stamp)
        && hit.len() == 1
        && hit.contains_key(key)
    {
        return hit;
    }
    let fields = probe_tool(key, tool);
    super::cuda::write_cache(&path, &stamp, &fields);
    fields
}

/// What identifies the compiler binary `tool` names on the PATH, if the PATH finds the
/// compiler itself (its resolved file is named after it, and is not ccache).
fn binary_stamp(tool: &str) -> Option<String> {
    let found = std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())?;
    let real = std::fs::canonicalize(&found).ok()?;
    let name = real.file_name()?.to_str()?;
    if !name.contains(tool) || name.contains("ccache") {
        return None;
    }
    file_stamp(&found)
}

/// What identifies the file at `found`: that path, the file it resolves to, and that file's
/// size, modification and change times and inode (another, replaced or rewritten binary
/// gives another stamp).
pub fn file_stamp(found: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(found).ok()?;
    let m = std::fs::metadata(&real).ok()?;
    Some(format!(
        "{}|{}|{}|{}.{}|{}.{}|{}",
        found.display(),
        real.display(),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        m.ino()
    ))
}

/// Runs `TOOL --version` and records the first version-looking token of its output.
pub fn probe_tool(key: &'static str, tool: &'static str) -> Fields {
    let value = match Cmd::new(tool).arg("--version").timeout(TOOL_TIMEOUT).run() {
        Ok(out) => {
            let text = if out.stdout.is_empty() {
                out.stderr_str()
            } else {
                out.stdout_str()
            };
            let first = text.lines().next().unwrap_or_default().to_string();
            version_token(&first).map_or_else(
                || Field::Unavailable(format!("no version in `{first}`")),
                Field::Value,
            )
        }
        Err(ProcessError::NotFound { .. }) => Field::Unavailable(format!("{tool} not found")),
        Err(e) => Field::Unavailable(first_line(&e.to_string())),
    };
    [(key.to_string(), value)].into_iter().collect()
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release() {
        let t = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            os_release_name(t).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }

    #[test]
    fn virtualisation_cases() {
        let vm = "flags\t: fpu vme hypervisor sse\n";
        assert_eq!(
            virtualization("flags: fpu", None, None, None, false),
            "none"
        );
        assert_eq!(
            virtualization(vm, Some("Amazon EC2\n"), Some("p5.48xlarge\n"), None, false),
            "vm (Amazon EC2 p5.48xlarge)"
        );
        assert_eq!(
            virtualization(vm, None, None, Some("0::/kubepods/x"), false),
            "vm, container (kubepods)"
        );
        assert_eq!(
            virtualization("", None, None, Some("0::/"), true),
            "container"
        );
    }

    #[test]
    fn missing_tool_is_unavailable() {
        let f = probe_tool("host.x", "repro-no-such-tool");
        assert_eq!(
            f["host.x"],
            Field::Unavailable("repro-no-such-tool not found".into())
        );
    }
}
