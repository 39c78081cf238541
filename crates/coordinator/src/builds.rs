//! Every copy's index kept built, as CouchDB's `ken` keeps them: a query reads each
//! range's index from one copy (see [`crate::copies::turned`]), then the range's other
//! copies are asked, in the background, to bring their own index of the same design up
//! to date. A copy that takes over a range (its preferred copy's member down) then has
//! its index ready.
//!
//! The client's answer never waits for them (a first query is as quick as with one copy
//! building). Each index of a range is asked again only when the preferred copy's
//! answer shows a new position (`update_seq`), so repeated queries of an unchanged
//! index ask nothing more.

use crate::copies::RangeAnswer;
use crate::Coordinator;
use bytes::Bytes;
use serde_json::Value;
use settee_cluster::ShardMap;
use std::collections::HashMap;
use std::sync::Mutex;

/// Indexes remembered at most; past it the memory starts again (at worst, the other
/// copies are asked once more than needed).
const REMEMBERED: usize = 10_000;

/// Where each range's preferred copy of each index stood when the other copies were last
/// asked to follow it.
#[derive(Default)]
pub(crate) struct Builds {
    asked_at: Mutex<HashMap<String, String>>,
}

impl Builds {
    /// Whether index `key` standing at `at` is news (the other copies not yet asked to
    /// reach it); remembered as asked from now on.
    fn news(&self, key: String, at: String) -> bool {
        let mut asked = self.asked_at.lock().expect("builds lock");
        if asked.len() >= REMEMBERED {
            asked.clear();
        }
        asked.insert(key, at.clone()).as_ref() != Some(&at)
    }
}

impl Coordinator {
    /// After a query answered (`answers`, one per range, each with its `update_seq`):
    /// the other copies of each range asked to `POST target(range)` with `body()` (a
    /// query that builds their index and returns nothing), in the background. `index`
    /// names the index (database, design and its revision).
    pub(crate) fn build_others(
        &self,
        map: &ShardMap,
        index: &str,
        answers: &[RangeAnswer],
        target: impl Fn(&str) -> String,
        body: impl FnOnce() -> Value,
    ) {
        // Made once, for the first range whose other copies are asked.
        let bytes = std::cell::LazyCell::new(|| Bytes::from(body().to_string()));
        for answer in answers {
            let Some(copies) = map.by_range.iter().find(|c| c.range == answer.range) else {
                continue;
            };
            if copies.nodes.len() < 2 {
                continue;
            }
            let at = format!("{} {}", answer.node, answer.body["update_seq"]);
            if !self.builds.news(format!("{index}\0{}", answer.range), at) {
                continue;
            }
            let target = target(&answer.range);
            for node in copies.nodes.iter().filter(|n| **n != answer.node) {
                // Not awaited: the task finishes on its own.
                drop(self.spawn_ask(
                    node.clone(),
                    "POST",
                    target.clone(),
                    None,
                    Some((*bytes).clone()),
                    None,
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_news_once() {
        let b = Builds::default();
        assert!(b.news("i\0r".into(), "a 3".into()));
        assert!(!b.news("i\0r".into(), "a 3".into()));
        assert!(b.news("i\0r".into(), "a 4".into()));
        assert!(b.news("i\0r".into(), "b 4".into()));
        assert!(b.news("j\0r".into(), "b 4".into()));
    }
}
