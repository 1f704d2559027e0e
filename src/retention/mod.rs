//! Retention: how long decided keys are kept, the start-up check of those settings,
//! and the background pruner (docs/EXPORT.md, "Retention").

mod archive;
mod pruner;
mod settings;

pub use crate::duration::HumanDuration;
pub use archive::prepare_dir as prepare_archive_dir;
pub use pruner::{PruneError, PruneMetrics, PruneSummary, Pruner};
pub use settings::{MAX_BATCH_SIZE, RetentionError, RetentionSettings};
