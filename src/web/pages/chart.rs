//! A small server-rendered chart: request volume per 5-minute bucket as grey bars, the
//! replay ratio as a line, conflicts as marks along the top, and every bucket where
//! replays spiked as a full-height red band. Only geometry is computed here;
//! `templates/overview.html` writes the SVG, and a sentence says the same in words.

use crate::guard::AttemptKind;
use crate::web::filters::{percent, thousands_sep, utc_hm};
use chrono::{DateTime, Utc};
use std::fmt::Write;

/// The replay share above which the overview marks replays as an incident: the replay
/// alert's absolute threshold (grafana/prometheus/idemwatch-rules.yml,
/// docs/RUNBOOK.md#idempotencyreplayspike), in percent.
pub const SPIKE_PERCENT: i64 = 5;
/// ... and at least this many replays, the alert's other count condition, so that one
/// client looping on its key in a quiet hour is not shown as an incident.
pub const SPIKE_MIN_REPLAYS: i64 = 30;

/// Whether `replays` of `requests` is what the replay alert pages on, on the two
/// conditions the database can tell (its usual-share and traffic conditions need
/// Prometheus's history). The overview's one definition of "replays are spiking".
pub fn replay_spike(replays: i64, requests: i64) -> bool {
    replays >= SPIKE_MIN_REPLAYS && replays * 100 > requests * SPIKE_PERCENT
}

/// Requests, replays and conflicts in one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Point {
    pub requests: i64,
    pub replays: i64,
    pub conflicts: i64,
}

impl Point {
    /// Counts `n` attempts of `kind`: an admission is a request (as
    /// `idempotency_requests_total` counts them); a replay returned a stored result or
    /// error; a conflict is a payload mismatch.
    pub fn add(&mut self, kind: AttemptKind, n: i64) {
        if kind.admission_outcome().is_some() {
            self.requests += n;
        }
        match kind {
            AttemptKind::Replayed | AttemptKind::ReplayedFailure => self.replays += n,
            AttemptKind::PayloadMismatch => self.conflicts += n,
            _ => {}
        }
    }
}

pub struct Bar {
    pub x: i64,
    pub y: f64,
    pub h: f64,
}

pub struct Chart {
    pub width: i64,
    pub height: i64,
    pub bars: Vec<Bar>,
    /// SVG path data of the replay ratio; broken where a bucket had no requests.
    pub line: String,
    /// x of each bucket with a conflict.
    pub marks: Vec<i64>,
    /// x of each bucket whose replays spiked ([`replay_spike`]).
    pub spikes: Vec<i64>,
    /// The width of one bucket.
    pub step: i64,
    /// The ratio at the top of the chart, e.g. `5%`.
    pub top: String,
    /// The chart in words, for screen readers and as the caption.
    pub summary: String,
}

const STEP: i64 = 2;
const HEIGHT: i64 = 64;
const TOP: f64 = 6.0;
const BOTTOM: f64 = 62.0;

/// The smallest of 1%, 2%, 5%, 10%, 20%, 50%, 100% at or above `ratio`.
fn ceiling(ratio: f64) -> f64 {
    [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
        .into_iter()
        .find(|c| ratio <= *c)
        .unwrap_or(1.0)
}

/// `series[i]` is the bucket starting at `start + i × bucket`.
pub fn replay_chart(series: &[Point], start: DateTime<Utc>, bucket_seconds: i64) -> Chart {
    let plot = BOTTOM - TOP;
    let max_requests = series.iter().map(|p| p.requests).max().unwrap_or(0).max(1);
    let ratio = |p: &Point| p.replays as f64 / p.requests as f64;
    let busy: Vec<(usize, &Point)> = series
        .iter()
        .enumerate()
        .filter(|(_, p)| p.requests > 0)
        .collect();
    let top = ceiling(busy.iter().map(|(_, p)| ratio(p)).fold(0.0, f64::max));

    let bars = busy
        .iter()
        .map(|(i, p)| {
            let h = (p.requests as f64 / max_requests as f64 * plot * 10.0).round() / 10.0;
            Bar {
                x: *i as i64 * STEP,
                y: BOTTOM - h,
                h,
            }
        })
        .collect();
    let mut line = String::new();
    let mut previous: Option<usize> = None;
    for (i, p) in &busy {
        let x = *i as i64 * STEP + STEP / 2;
        let y = ((BOTTOM - ratio(p) / top * plot) * 10.0).round() / 10.0;
        let command = if previous == Some(i.wrapping_sub(1)) {
            'L'
        } else {
            'M'
        };
        let _ = write!(line, "{command}{x} {y}");
        previous = Some(*i);
    }
    let marks = series
        .iter()
        .enumerate()
        .filter(|(_, p)| p.conflicts > 0)
        .map(|(i, _)| i as i64 * STEP)
        .collect();
    let spikes: Vec<i64> = busy
        .iter()
        .filter(|(_, p)| replay_spike(p.replays, p.requests))
        .map(|(i, _)| *i as i64 * STEP)
        .collect();

    let requests: i64 = series.iter().map(|p| p.requests).sum();
    let replays: i64 = series.iter().map(|p| p.replays).sum();
    let conflicts: i64 = series.iter().map(|p| p.conflicts).sum();
    let at = |i: usize| start + chrono::TimeDelta::seconds(i as i64 * bucket_seconds);
    let peak = busy
        .iter()
        .max_by(|a, b| ratio(a.1).total_cmp(&ratio(b.1)))
        .filter(|(_, p)| p.replays > 0)
        .map(|(i, p)| {
            format!(
                "peak {} at {}",
                percent(p.replays, p.requests),
                utc_hm(at(*i))
            )
        })
        .unwrap_or_else(|| "no replays".to_string());
    let spiked = match spikes.len() {
        0 => String::new(),
        n => format!(
            " Replays above {SPIKE_PERCENT}% for {} minutes.",
            n as i64 * bucket_seconds / 60
        ),
    };
    let summary = format!(
        "Replay ratio per 5 minutes: {} overall ({} of {} requests), {peak}; {} {}.{spiked}",
        percent(replays, requests),
        thousands_sep(replays),
        thousands_sep(requests),
        thousands_sep(conflicts),
        if conflicts == 1 {
            "conflict"
        } else {
            "conflicts"
        },
    );
    Chart {
        width: series.len() as i64 * STEP,
        height: HEIGHT,
        bars,
        line,
        marks,
        spikes,
        step: STEP,
        top: format!("{}%", (top * 100.0).round()),
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(requests: i64, replays: i64, conflicts: i64) -> Point {
        Point {
            requests,
            replays,
            conflicts,
        }
    }

    #[test]
    fn the_scale_rounds_up_to_a_readable_ceiling() {
        let cases = [
            (0.0, 0.01),
            (0.004, 0.01),
            (0.011, 0.02),
            (0.22, 0.5),
            (0.9, 1.0),
        ];
        for (ratio, want) in cases {
            assert_eq!(ceiling(ratio), want, "{ratio}");
        }
    }

    #[test]
    fn the_line_breaks_where_there_was_no_traffic_and_the_words_say_the_peak() {
        let start = DateTime::parse_from_rfc3339("2026-11-29T14:00:00Z")
            .unwrap()
            .to_utc();
        let series = [p(100, 0, 0), p(100, 22, 1), p(0, 0, 0), p(10, 1, 0)];
        let c = replay_chart(&series, start, 300);
        assert_eq!(c.width, 8);
        assert_eq!(c.top, "50%");
        assert_eq!(c.line, "M1 62L3 37.4M7 50.8");
        assert_eq!(c.marks, vec![2]);
        assert_eq!(c.bars.len(), 3);
        assert!(c.spikes.is_empty(), "22 replays are under the alert's 30");
        assert_eq!(
            c.summary,
            "Replay ratio per 5 minutes: 11.0% overall (23 of 210 requests), peak 22.0% at 14:05 UTC; 1 conflict."
        );
    }

    #[test]
    fn an_idle_day_draws_nothing_and_says_so() {
        let start = DateTime::parse_from_rfc3339("2026-11-29T14:00:00Z")
            .unwrap()
            .to_utc();
        let c = replay_chart(&[Point::default(); 3], start, 300);
        assert!(c.line.is_empty() && c.bars.is_empty() && c.marks.is_empty());
        assert!(
            c.summary
                .contains("– overall (0 of 0 requests), no replays; 0 conflicts"),
            "{}",
            c.summary
        );
    }

    #[test]
    fn minutes_of_incident_are_a_band_and_a_sentence() {
        let start = DateTime::parse_from_rfc3339("2026-11-29T14:00:00Z")
            .unwrap()
            .to_utc();
        let series = [
            p(3000, 12, 0),
            p(3000, 570, 0),
            p(3000, 600, 0),
            p(20, 2, 0),
        ];
        let c = replay_chart(&series, start, 300);
        assert_eq!(
            c.spikes,
            vec![2, 4],
            "two buckets over 5% with 30 replays or more"
        );
        assert!(
            c.summary.ends_with(" Replays above 5% for 10 minutes."),
            "{}",
            c.summary
        );
    }

    #[test]
    fn a_spike_is_the_alerts_share_and_count() {
        assert!(replay_spike(30, 599));
        assert!(!replay_spike(30, 600), "5% exactly is not above 5%");
        assert!(!replay_spike(29, 100), "one looping client");
    }
}
