//! Progress bars and spinners on stderr, hidden when stderr is not a
//! terminal (so pipes and logs see nothing of them).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar counting to `len`, labelled `what`.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{bar:40}] {human_pos}/{human_len} ({per_sec}, eta {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

/// A spinner saying `what`, ticking by itself.
pub fn spinner(what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let spinner = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {human_pos} {elapsed}") {
        spinner.set_style(style);
    }
    spinner.set_message(what.to_owned());
    spinner.enable_steady_tick(Duration::from_millis(100));
    spinner
}
