//! A kernel's parameter list read from its PTX, and the launch's arguments checked
//! against it (count and sizes).

use super::*;

/// The parameter sizes (bytes) of an entry point, from its PTX `.param` list.
pub fn ptx_params(ptx: &str, entry: &str) -> Option<Vec<usize>> {
    let start = ptx.find(&format!(".entry {entry}("))?;
    let rest = &ptx[start..];
    let body = &rest[rest.find('(')? + 1..rest.find(')')?];
    Some(
        body.split(',')
            .filter(|p| p.contains(".param"))
            .map(|p| {
                let p = p.trim();
                if p.contains('[') {
                    // `.param .align 8 .b8 name[16]`: an aggregate of the bracketed size.
                    p.rsplit_once('[')
                        .and_then(|(_, n)| n.trim_end_matches(']').parse().ok())
                        .unwrap_or(0)
                } else if p.contains(".u64")
                    || p.contains(".s64")
                    || p.contains(".f64")
                    || p.contains(".b64")
                {
                    8
                } else if p.contains(".u16")
                    || p.contains(".s16")
                    || p.contains(".f16")
                    || p.contains(".b16")
                {
                    2
                } else if p.contains(".u8") || p.contains(".s8") || p.contains(".b8") {
                    1
                } else {
                    4
                }
            })
            .collect(),
    )
}

/// Checks the arguments against the kernel's parameters before anything is launched.
pub fn check_arity(ptx: &str, launch: &LaunchSpec, args: &[ArgSpec]) -> Result<(), ArityError> {
    let Some(params) = ptx_params(ptx, &launch.kernel) else {
        return Ok(());
    };
    if params.len() != args.len() {
        return Err(ArityError::Count {
            kernel: launch.kernel.clone(),
            params: params.len(),
            args: args.len(),
        });
    }
    for (i, (size, a)) in params.iter().zip(args).enumerate() {
        let (name, want) = match a {
            ArgSpec::Buffer { name, .. } => (name, 8),
            ArgSpec::Scalar { name, dtype, .. } => (name, dtype.size()),
        };
        if *size != want {
            return Err(ArityError::Size {
                kernel: launch.kernel.clone(),
                index: i,
                size: *size,
                name: name.clone(),
                want,
            });
        }
    }
    Ok(())
}
