//! Progress of a long job on stderr: a bar when stderr is a terminal (indicatif), and when it is
//! not (a pipe, a log file, CI) one line every few seconds with the position, the elapsed time
//! and an estimate of the time left. A [`Progress`] is a cheap handle that any thread may
//! advance; results never go through it (stdout stays byte-for-byte the same whatever the mode).
//! A job that ends before the first line is due prints nothing, so short commands stay quiet.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How progress is shown (`--progress`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// A bar on a terminal, periodic lines otherwise.
    #[default]
    Auto,
    /// Always the bar (drawn only where stderr is a terminal).
    Bar,
    /// Always periodic lines.
    Lines,
    /// Nothing.
    Off,
}

impl std::str::FromStr for Mode {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Mode> {
        match s {
            "auto" => Ok(Mode::Auto),
            "bar" => Ok(Mode::Bar),
            "lines" => Ok(Mode::Lines),
            "off" => Ok(Mode::Off),
            _ => Err(crate::Error::invalid(
                "--progress",
                format!("'{s}' is not one of auto, bar, lines, off"),
            )),
        }
    }
}

/// How often the line mode prints.
pub const LINE_EVERY: Duration = Duration::from_secs(10);

impl Mode {
    /// Starts showing a job of `total` units named `unit` ("runs", "requests", …) under the
    /// label `what`.
    pub fn start(self, what: &str, total: u64, unit: &'static str) -> Progress {
        self.start_every(what, total, unit, LINE_EVERY)
    }

    /// [`Mode::start`] with the line mode printing every `every`.
    pub fn start_every(
        self,
        what: &str,
        total: u64,
        unit: &'static str,
        every: Duration,
    ) -> Progress {
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let show = match self {
            Mode::Off => return Progress(None),
            Mode::Auto if terminal => Show::Bar(bar(what, total, unit)),
            Mode::Bar => Show::Bar(bar(what, total, unit)),
            Mode::Auto | Mode::Lines => Show::Lines,
        };
        let inner = Arc::new(Inner {
            what: what.to_string(),
            unit,
            total: AtomicU64::new(total),
            pos: AtomicU64::new(0),
            start: Instant::now(),
            message: Mutex::new(String::new()),
            printed: AtomicBool::new(false),
            show,
            ticker: Mutex::new(None),
        });
        if matches!(inner.show, Show::Lines) {
            let (tx, rx) = mpsc::channel::<()>();
            // a weak handle: a job dropped without `finish` (an error) stops its ticker too
            let me = Arc::downgrade(&inner);
            let handle = std::thread::spawn(move || loop {
                match rx.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => match me.upgrade() {
                        Some(i) => i.print_line(),
                        None => return,
                    },
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            });
            if let Ok(mut t) = inner.ticker.lock() {
                *t = Some((tx, handle));
            }
        }
        Progress(Some(inner))
    }
}

fn bar(what: &str, total: u64, unit: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(total);
    let template = format!(
        "{what}: {{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {unit}, about {{eta}} left {{wide_msg}}"
    );
    b.set_style(
        indicatif::ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    b.enable_steady_tick(Duration::from_millis(500));
    b
}

enum Show {
    Bar(indicatif::ProgressBar),
    Lines,
}

struct Inner {
    what: String,
    unit: &'static str,
    total: AtomicU64,
    pos: AtomicU64,
    start: Instant,
    message: Mutex<String>,
    /// Whether the line mode has printed (then the end is printed too).
    printed: AtomicBool,
    show: Show,
    ticker: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
}

/// Seconds as "42 s", "3 min 05 s" or "1 h 02 min".
pub fn human(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=99 => format!("{s} s"),
        100..=3599 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

impl Inner {
    /// The line the line mode prints now.
    fn line(&self) -> String {
        let (pos, total) = (
            self.pos.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        );
        let elapsed = self.start.elapsed().as_secs_f64();
        let pct = if total == 0 {
            100.0
        } else {
            100.0 * pos as f64 / total as f64
        };
        let eta = if pos == 0 || pos >= total {
            String::new()
        } else {
            format!(
                ", about {} left",
                human(elapsed * (total - pos) as f64 / pos as f64)
            )
        };
        let msg = self.message.lock().map(|m| m.clone()).unwrap_or_default();
        let msg = if msg.is_empty() {
            msg
        } else {
            format!(" ({msg})")
        };
        format!(
            "{}: {pos}/{total} {} ({pct:.0}%), {} elapsed{eta}{msg}",
            self.what,
            self.unit,
            human(elapsed)
        )
    }

    fn print_line(&self) {
        self.printed.store(true, Ordering::Relaxed);
        eprintln!("{}", self.line());
    }
}

/// A running job's progress (cloned handles share it); [`Progress::finish`] ends it.
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<Inner>>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Progress(off)"),
            Some(i) => write!(f, "Progress({})", i.what),
        }
    }
}

impl Progress {
    /// Shows nothing.
    pub fn hidden() -> Progress {
        Progress(None)
    }

    /// Advances by `n` units.
    pub fn inc(&self, n: u64) {
        if let Some(i) = &self.0 {
            i.pos.fetch_add(n, Ordering::Relaxed);
            if let Show::Bar(b) = &i.show {
                b.inc(n);
            }
        }
    }

    /// Moves to `pos` units.
    pub fn set_position(&self, pos: u64) {
        if let Some(i) = &self.0 {
            i.pos.store(pos, Ordering::Relaxed);
            if let Show::Bar(b) = &i.show {
                b.set_position(pos);
            }
        }
    }

    /// Says what is running now (shown after the position).
    pub fn set_message(&self, msg: impl Into<String>) {
        if let Some(i) = &self.0 {
            let msg = msg.into();
            if let Show::Bar(b) = &i.show {
                b.set_message(msg.clone());
            }
            if let Ok(mut m) = i.message.lock() {
                *m = msg;
            }
        }
    }

    /// Prints a result worth keeping as its own line (above the bar; in the line mode, as a
    /// line of its own; nothing when hidden): a long job cut off still leaves what it finished.
    pub fn note(&self, line: &str) {
        if let Some(i) = &self.0 {
            match &i.show {
                Show::Bar(b) => b.println(line),
                Show::Lines => eprintln!("{line}"),
            }
        }
    }

    /// The units done so far.
    pub fn position(&self) -> u64 {
        self.0.as_ref().map_or(0, |i| i.pos.load(Ordering::Relaxed))
    }

    /// Seconds since the job started (0 when hidden).
    pub fn elapsed(&self) -> f64 {
        self.0
            .as_ref()
            .map_or(0.0, |i| i.start.elapsed().as_secs_f64())
    }

    /// Ends the job: clears the bar; in the line mode, when a line was printed, says that it
    /// is done and how long it took.
    pub fn finish(&self) {
        let Some(i) = &self.0 else {
            return;
        };
        let ticker = i.ticker.lock().ok().and_then(|mut t| t.take());
        if let Some((tx, handle)) = ticker {
            let _ = tx.send(());
            let _ = handle.join();
        }
        match &i.show {
            Show::Bar(b) => b.finish_and_clear(),
            Show::Lines => {
                if i.printed.load(Ordering::Relaxed) {
                    eprintln!(
                        "{}: done, {} {} in {}",
                        i.what,
                        i.pos.load(Ordering::Relaxed),
                        i.unit,
                        human(i.start.elapsed().as_secs_f64())
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_seconds_minutes_or_hours() {
        assert_eq!(human(0.4), "0 s");
        assert_eq!(human(42.0), "42 s");
        assert_eq!(human(185.0), "3 min 05 s");
        assert_eq!(human(3720.0), "1 h 02 min");
    }

    #[test]
    fn a_line_gives_position_share_elapsed_estimate_and_message() {
        let p = Mode::Lines.start_every("compare", 8, "runs", Duration::from_secs(3600));
        p.inc(2);
        p.set_message("lazy at 10 req/s");
        let line = p.0.as_ref().unwrap().line();
        assert!(line.starts_with("compare: 2/8 runs (25%), "), "{line}");
        assert!(line.contains(" elapsed, about "), "{line}");
        assert!(line.ends_with(" left (lazy at 10 req/s)"), "{line}");
        p.set_position(8);
        let line = p.0.as_ref().unwrap().line();
        assert!(!line.contains("left"), "{line}");
        p.finish();
    }

    #[test]
    fn the_line_mode_prints_on_its_interval_and_stops_at_finish() {
        let p = Mode::Lines.start_every("x", 4, "runs", Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(40));
        p.inc(4);
        p.finish();
        assert!(p.0.as_ref().unwrap().printed.load(Ordering::Relaxed));
        // the ticker has been joined: finishing twice is harmless
        p.finish();
        assert_eq!(p.position(), 4);
    }

    #[test]
    fn off_shows_nothing_and_counts_nothing() {
        let p = Mode::Off.start("x", 4, "runs");
        p.inc(3);
        assert_eq!(p.position(), 0);
        assert_eq!(p.elapsed(), 0.0);
        p.finish();
        assert_eq!(format!("{p:?}"), "Progress(off)");
    }
}
