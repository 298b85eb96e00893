//! The members of a CUDA fat binary (what `nvcc -fatbin` writes, and what `nvcc -c` embeds in
//! a host object's `.nv_fatbin` section): one cubin or PTX module per target.
//!
//! The container is undocumented; its layout here is what nvcc 12 and 13 write, as
//! `cuobjdump -lelf -lptx` lists it: a 16-byte header (magic `0xBA55ED50`, version, header
//! size, size of what follows), then members, each a header (kind: 1 PTX, 2 ELF; its header
//! size; its payload size; the architecture as a number, `90` for `sm_90`; flags, of which
//! `0x8000` means zstd-compressed, as CUDA 13's `-compress-mode` writes, and `0x2000` the older
//! LZ-style compression) and its payload. Several containers may follow each other (a host
//! object's `.nv_fatbin` section). The bytes come from a compiler: every size is checked, and
//! a compressed member is unpacked to at most [`MAX_MEMBER`] bytes.

use std::borrow::Cow;

/// The first four bytes of a fat binary (little-endian `0xBA55ED50`).
pub const MAGIC: [u8; 4] = [0x50, 0xed, 0x55, 0xba];
/// The flag of a zstd-compressed payload (CUDA 13).
const ZSTD: u64 = 0x8000;
/// The flag of the older LZ-style compression, which this reader does not unpack.
const OLD_COMPRESSION: u64 = 0x2000;
/// The largest member unpacked: far above any real cubin.
pub const MAX_MEMBER: usize = 256 << 20;
/// The size of a member's header as nvcc writes it: the fields read here end within it.
const MEMBER_HEADER: usize = 0x40;

/// What a member holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// PTX text.
    Ptx,
    /// A cubin.
    Elf,
    /// Something this reader does not know.
    Other(u16),
}

/// One member of a fat binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member<'a> {
    /// PTX or cubin.
    pub kind: Kind,
    /// The architecture number (`90` for `sm_90` or `compute_90`).
    pub arch: u32,
    /// Whether its payload is still compressed (the older compression, which this reader
    /// does not unpack): it cannot be read here.
    pub compressed: bool,
    /// Its bytes, unpacked where they were zstd-compressed (padding included for PTX, which
    /// ends at its first NUL).
    pub payload: Cow<'a, [u8]>,
}

impl Member<'_> {
    /// The target this member is for: `sm_90` for a cubin, `compute_90` for PTX.
    pub fn target(&self) -> String {
        match self.kind {
            Kind::Ptx => format!("compute_{}", self.arch),
            _ => format!("sm_{}", self.arch),
        }
    }
}

/// Why bytes cannot be read as a fat binary.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FatbinError {
    /// They do not start with the magic.
    #[error("not a fat binary")]
    NotFatbin,
    /// A size points past the end.
    #[error("malformed fat binary: {what} at byte {at} lies outside the file")]
    Truncated {
        /// What.
        what: &'static str,
        /// Its offset.
        at: usize,
    },
    /// A compressed member does not unpack.
    #[error("malformed fat binary: the member at byte {at} does not unpack: {cause}")]
    Unpack {
        /// Its offset.
        at: usize,
        /// What zstd said.
        cause: String,
    },
}

/// Whether `bytes` start with the fat binary magic.
pub fn is_fatbin(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("four bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

fn span(len: usize, at: usize, size: u64, what: &'static str) -> Result<usize, FatbinError> {
    usize::try_from(size)
        .ok()
        .and_then(|s| at.checked_add(s))
        .filter(|end| *end <= len)
        .ok_or(FatbinError::Truncated { what, at })
}

/// Every member of every container in `bytes`, in order. Zero padding after a container
/// (as in a section) ends the list.
pub fn members(bytes: &[u8]) -> Result<Vec<Member<'_>>, FatbinError> {
    if !is_fatbin(bytes) {
        return Err(FatbinError::NotFatbin);
    }
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.iter().all(|b| *b == 0) {
            break;
        }
        if !is_fatbin(rest) {
            return Err(FatbinError::NotFatbin);
        }
        span(bytes.len(), at, 16, "a container header")?;
        // A header shorter than its own fields would let the walk stand still.
        let header = (u16_at(bytes, at + 6) as usize).max(16);
        let body = span(bytes.len(), at, header as u64, "a container header")?;
        let end = span(bytes.len(), body, u64_at(bytes, at + 8), "a container")?;
        let mut m = body;
        while m < end {
            span(end, m, MEMBER_HEADER as u64, "a member header")?;
            let h = &bytes[m..m + MEMBER_HEADER];
            let header = u32_at(h, 4) as u64;
            let start = span(end, m, header.max(MEMBER_HEADER as u64), "a member header")?;
            let stop = span(end, start, u64_at(h, 8), "a member")?;
            let flags = u64_at(h, 0x28);
            let stored = &bytes[start..stop];
            let payload = if flags & ZSTD != 0 {
                // The compressed length, and the length unpacked (bounded).
                let packed = (u32_at(h, 0x10) as usize).min(stored.len());
                let full = usize::try_from(u64_at(h, 0x38))
                    .unwrap_or(usize::MAX)
                    .min(MAX_MEMBER);
                Cow::Owned(
                    zstd::bulk::decompress(&stored[..packed], full).map_err(|e| {
                        FatbinError::Unpack {
                            at: m,
                            cause: e.to_string(),
                        }
                    })?,
                )
            } else {
                Cow::Borrowed(stored)
            };
            out.push(Member {
                kind: match u16_at(h, 0) {
                    1 => Kind::Ptx,
                    2 => Kind::Elf,
                    k => Kind::Other(k),
                },
                arch: u32_at(h, 0x1c),
                compressed: flags & ZSTD == 0 && flags & OLD_COMPRESSION != 0,
                payload,
            });
            m = stop;
        }
        at = end;
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A container of `(kind, arch, flags, payload)` members, as nvcc lays one out.
    pub(crate) fn build(members: &[(u16, u32, u64, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, arch, flags, payload) in members {
            let mut h = vec![0u8; MEMBER_HEADER];
            h[0..2].copy_from_slice(&kind.to_le_bytes());
            h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
            h[4..8].copy_from_slice(&(MEMBER_HEADER as u32).to_le_bytes());
            h[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
            h[0x1c..0x20].copy_from_slice(&arch.to_le_bytes());
            h[0x28..0x30].copy_from_slice(&flags.to_le_bytes());
            body.extend(h);
            body.extend_from_slice(payload);
        }
        let mut out = MAGIC.to_vec();
        out.extend(1u16.to_le_bytes());
        out.extend(16u16.to_le_bytes());
        out.extend((body.len() as u64).to_le_bytes());
        out.extend(body);
        out
    }

    #[test]
    fn members_in_order_with_their_targets() {
        let mut f = build(&[
            (2, 89, 0x11, b"\x7fELF-89"),
            (2, 90, 0x11, b"\x7fELF-90"),
            (1, 90, 0x2011, b"zz"),
        ]);
        f.extend(build(&[(2, 100, 0x11, b"\x7fELF-100")]));
        f.extend([0u8; 8]);
        let m = members(&f).unwrap();
        let targets: Vec<String> = m.iter().map(Member::target).collect();
        assert!(m[2].compressed, "the older compression is not unpacked");
        assert_eq!(targets, ["sm_89", "sm_90", "compute_90", "sm_100"]);
        assert_eq!(&m[1].payload[..], b"\x7fELF-90");
        assert!(!m[0].compressed && !m[1].compressed);
        assert_eq!(members(b"\x7fELF"), Err(FatbinError::NotFatbin));
    }

    #[test]
    fn zstd_members_are_unpacked() {
        let cubin = b"\x7fELF and the rest of a cubin".repeat(20);
        let packed = zstd::bulk::compress(&cubin, 3).unwrap();
        let mut f = build(&[(2, 90, 0x8011, &packed)]);
        // The compressed and unpacked lengths, where nvcc writes them.
        f[16 + 0x10..16 + 0x14].copy_from_slice(&(packed.len() as u32).to_le_bytes());
        f[16 + 0x38..16 + 0x40].copy_from_slice(&(cubin.len() as u64).to_le_bytes());
        let m = members(&f).unwrap();
        assert_eq!(&m[0].payload[..], &cubin[..]);
        assert!(!m[0].compressed);
        // Garbage that claims to be zstd is an error, not a panic.
        let mut bad = f.clone();
        let at = 16 + 0x40;
        bad[at..at + 4].copy_from_slice(b"junk");
        assert!(matches!(members(&bad), Err(FatbinError::Unpack { .. })));
    }

    /// A header that claims no size and no body once made the walk stand still.
    #[test]
    fn empty_containers_end_the_walk() {
        let mut f = MAGIC.to_vec();
        f.extend([1, 0, 0, 0]);
        f.extend(0u64.to_le_bytes());
        f.extend(f.clone());
        assert_eq!(members(&f), Ok(vec![]));
    }

    #[test]
    fn hostile_containers_are_errors_not_panics() {
        let good = build(&[(2, 89, 0x11, b"\x7fELF-89"), (1, 90, 0x11, b"ptx")]);
        for cut in 0..good.len() {
            let _ = members(&good[..cut]);
        }
        for at in 0..good.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[at] = v;
                let _ = members(&bad);
            }
        }
    }
}
