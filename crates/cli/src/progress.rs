//! Progress bars and spinners on stderr. indicatif hides them when stderr is not a
//! terminal, so output captured by scripts and tests holds only the results.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::time::Duration;

/// A bar of `len` units with rate and ETA, labelled `prefix`.
pub fn bar(prefix: &str, len: u64, unit: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let template = format!(
        "{{prefix:>14.bold}} [{{bar:32}}] {{human_pos}}/{{human_len}} {unit} {{rate:>10}} ETA {{eta}}"
    );
    pb.set_style(
        ProgressStyle::with_template(&template)
            .expect("template")
            .with_key(
                "rate",
                |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0}/s", state.per_sec());
                },
            )
            .progress_chars("=> "),
    );
    pb.set_prefix(prefix.to_string());
    pb
}

/// A bar of percent done, as servers report compaction's `progress`, with a message.
pub fn percent(prefix: &str, msg: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(100), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{prefix:>14.bold} [{bar:32}] {pos:>3}% {msg} ({elapsed})")
            .expect("template")
            .progress_chars("=> "),
    );
    pb.set_prefix(prefix.to_string());
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// A spinner for work of unknown length, with a message and the time spent.
pub fn spinner(prefix: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{prefix:>14.bold} {spinner} {msg} ({elapsed})")
            .expect("template"),
    );
    pb.set_prefix(prefix.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}
