//! Reading PostgreSQL's `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`: for the tests that
//! check a statement's work is bounded by what it returns, not by the table's size.

use serde_json::Value;

/// The most (shared hit + read) blocks any node of the plan touched.
pub fn most_blocks(node: &Value) -> i64 {
    let own = ["Shared Hit Blocks", "Shared Read Blocks"]
        .iter()
        .filter_map(|k| node[*k].as_i64())
        .sum::<i64>();
    let children = node["Plans"]
        .as_array()
        .into_iter()
        .flatten()
        .map(most_blocks);
    children.fold(own, i64::max)
}
