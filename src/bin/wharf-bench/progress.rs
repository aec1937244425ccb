//! A spinner per scenario on stderr while it runs, hidden when stderr is
//! not a terminal; the table on stdout is unchanged. The spinner ticks on
//! indicatif's own thread, so the measured loops never touch it (the
//! 1 -> N publisher moves its bar only every 2000 messages, where it
//! already waits for a receipt).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Clears its bar when the scenario ends (or unwinds).
pub(crate) struct Scenario(pub(crate) ProgressBar);

impl Drop for Scenario {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// A spinner naming the scenario that runs, with the time it has taken.
pub(crate) fn scenario(name: impl Into<String>) -> Scenario {
    if !std::io::stderr().is_terminal() {
        return Scenario(ProgressBar::hidden());
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
        bar.set_style(style);
    }
    bar.set_message(name.into());
    bar.enable_steady_tick(Duration::from_millis(200));
    Scenario(bar)
}

/// A bar to `len` for a scenario whose progress is known.
pub(crate) fn counted(name: impl Into<String>, len: u64) -> Scenario {
    if !std::io::stderr().is_terminal() {
        return Scenario(ProgressBar::hidden());
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:30}] {human_pos}/{human_len} {elapsed}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(name.into());
    bar.enable_steady_tick(Duration::from_millis(200));
    Scenario(bar)
}
