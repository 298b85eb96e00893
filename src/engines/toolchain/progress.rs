//! The progress a toolchain install shows: `repro toolchain install`'s, and a build's when
//! a pinned toolchain installs itself on first use.

/// `repro toolchain install`'s progress: status lines on stderr, and for downloading,
/// verifying and unpacking a bar of bytes with an ETA (a byte count and rate while pip
/// downloads, whose total is not known ahead). Bars show on a terminal only; `-q` and
/// `--json` show nothing.
pub struct InstallProgress {
    quiet: bool,
    bar: Option<(&'static str, indicatif::ProgressBar)>,
}

impl InstallProgress {
    /// Silent when `quiet`.
    pub fn new(quiet: bool) -> Self {
        InstallProgress { quiet, bar: None }
    }

    /// Clears the bar.
    pub fn finish(&mut self) {
        if let Some((_, b)) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl super::install::Progress for InstallProgress {
    fn message(&mut self, m: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some((_, b)) if !b.is_hidden() => b.println(crate::foundation::output::sanitize(m)),
            _ => eprintln!("{}", crate::foundation::output::sanitize(m)),
        }
    }

    fn bytes(&mut self, phase: &'static str, done: u64, total: Option<u64>) {
        if self.bar.as_ref().is_none_or(|(p, _)| *p != phase) {
            self.finish();
            let bar = match total {
                Some(t) => crate::foundation::output::progress_bytes(self.quiet, t, phase),
                None if self.quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) => {
                    indicatif::ProgressBar::hidden()
                }
                None => {
                    let b = indicatif::ProgressBar::new_spinner();
                    b.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{spinner} downloading {bytes} ({bytes_per_sec}, {elapsed})",
                        )
                        .expect("a valid template"),
                    );
                    b.enable_steady_tick(std::time::Duration::from_millis(120));
                    b
                }
            };
            self.bar = Some((phase, bar));
        }
        if let Some((_, b)) = &self.bar {
            if let Some(t) = total
                && b.length() != Some(t)
            {
                b.set_length(t);
            }
            b.set_position(done);
        }
    }
}
