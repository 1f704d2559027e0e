//! Figures, printed as a table and as JSON.

use serde::Serialize;
use std::time::Duration;

pub struct Latencies(Vec<Duration>);

impl Latencies {
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        Self(samples)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let i = ((self.0.len() as f64 - 1.0) * q).round() as usize;
        self.0[i].as_secs_f64() * 1000.0
    }
    pub fn p50_ms(&self) -> f64 {
        self.quantile_ms(0.50)
    }
    pub fn p99_ms(&self) -> f64 {
        self.quantile_ms(0.99)
    }
}

#[derive(Debug, Serialize)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    pub value: f64,
    /// The same-run baseline, when the figure is a comparison.
    pub baseline: Option<f64>,
    pub ratio: Option<f64>,
    pub note: String,
    pub target: Option<String>,
    pub met: Option<bool>,
}

impl Figure {
    pub fn ratio(
        name: String,
        unit: &str,
        value: f64,
        baseline: f64,
        target: Option<(&str, bool)>,
    ) -> Figure {
        eprintln!("measured: {name}: {value:.2} {unit} (baseline {baseline:.2})");
        Figure {
            name,
            unit: unit.into(),
            value,
            baseline: Some(baseline),
            ratio: Some(value / baseline),
            note: String::new(),
            target: target.map(|t| t.0.to_string()),
            met: target.map(|t| t.1),
        }
    }
    pub fn plain(
        name: String,
        unit: &str,
        value: f64,
        note: String,
        target: Option<(&str, bool)>,
    ) -> Figure {
        eprintln!("measured: {name}: {value:.2} {unit} ({note})");
        Figure {
            name,
            unit: unit.into(),
            value,
            baseline: None,
            ratio: None,
            note,
            target: target.map(|t| t.0.to_string()),
            met: target.map(|t| t.1),
        }
    }
}

pub fn print(figures: &[Figure]) {
    println!("| figure | value | baseline | ratio | target | met | note |");
    println!("|---|---|---|---|---|---|---|");
    for f in figures {
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.2}"));
        println!(
            "| {} | {:.2} {} | {} | {} | {} | {} | {} |",
            f.name,
            f.value,
            f.unit,
            opt(f.baseline),
            opt(f.ratio),
            f.target.as_deref().unwrap_or(""),
            f.met.map_or("", |m| if m { "yes" } else { "NO" }),
            f.note
        );
    }
    println!(
        "\nJSON:\n{}",
        serde_json::to_string_pretty(figures).unwrap()
    );
}
