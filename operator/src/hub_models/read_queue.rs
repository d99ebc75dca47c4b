//! Which Hub read starts next: reads wait per namespace, each namespace has at most one read in
//! flight, and namespaces take turns (round robin) for the few reads that run at once. One
//! namespace with a thousand jobs naming a thousand repositories then delays only itself: a
//! job in another namespace is read as soon as one read ends. Pure bookkeeping, no IO.
use std::collections::{HashMap, HashSet, VecDeque};

/// The reads waiting and the namespaces reading.
#[derive(Debug)]
pub struct ReadQueue<K> {
    waiting: HashMap<String, VecDeque<K>>,
    /// Namespaces with reads waiting, in the order they get their next turn.
    turns: VecDeque<String>,
    /// Namespaces with a read in flight.
    reading: HashSet<String>,
    max_in_flight: usize,
}

impl<K: Clone + PartialEq> ReadQueue<K> {
    /// At most `max_in_flight` reads at once (at least one).
    pub fn new(max_in_flight: usize) -> Self {
        ReadQueue {
            waiting: HashMap::new(),
            turns: VecDeque::new(),
            reading: HashSet::new(),
            max_in_flight: max_in_flight.max(1),
        }
    }

    /// `key` waits for a read on behalf of `namespace` (once per namespace).
    pub fn push(&mut self, namespace: &str, key: K) {
        let queue = self.waiting.entry(namespace.to_string()).or_default();
        if queue.contains(&key) {
            return;
        }
        queue.push_back(key);
        if !self.turns.iter().any(|n| n == namespace) {
            self.turns.push_back(namespace.to_string());
        }
    }

    /// `key` waits no more, in any namespace (its cache entry went).
    pub fn remove(&mut self, key: &K) {
        for queue in self.waiting.values_mut() {
            queue.retain(|k| k != key);
        }
        self.drop_empty();
    }

    /// The next read to start, if a slot is free: the first namespace in turn with nothing in
    /// flight gives its oldest key for which `wanted` holds (keys it no longer wants, e.g.
    /// started for another namespace, are dropped). The namespace is then reading until
    /// [`ReadQueue::finished`].
    pub fn next(&mut self, wanted: impl Fn(&K) -> bool) -> Option<(String, K)> {
        if self.reading.len() >= self.max_in_flight {
            return None;
        }
        for _ in 0..self.turns.len() {
            let namespace = self.turns.pop_front()?;
            if self.reading.contains(&namespace) {
                self.turns.push_back(namespace);
                continue;
            }
            let queue = self.waiting.entry(namespace.clone()).or_default();
            let mut found = None;
            while let Some(key) = queue.pop_front() {
                if wanted(&key) {
                    found = Some(key);
                    break;
                }
            }
            if queue.is_empty() {
                self.waiting.remove(&namespace);
            } else {
                self.turns.push_back(namespace.clone());
            }
            if let Some(key) = found {
                self.reading.insert(namespace.clone());
                return Some((namespace, key));
            }
        }
        None
    }

    /// `namespace`'s read ended (its blocking work included): its slot is free.
    pub fn finished(&mut self, namespace: &str) {
        self.reading.remove(namespace);
    }

    /// Reads in flight.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.reading.len()
    }

    fn drop_empty(&mut self) {
        self.waiting.retain(|_, queue| !queue.is_empty());
        let waiting = &self.waiting;
        self.turns.retain(|n| waiting.contains_key(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flooding_namespace_does_not_starve_another() {
        let mut queue = ReadQueue::new(4);
        for i in 0..10 {
            queue.push("flood", format!("flood/{i}"));
        }
        queue.push("quiet", "quiet/one".to_string());
        let any = |_: &String| true;
        assert_eq!(queue.next(any), Some(("flood".into(), "flood/0".into())));
        assert_eq!(
            queue.next(any),
            Some(("quiet".into(), "quiet/one".into())),
            "the other namespace goes next"
        );
        assert_eq!(queue.next(any), None, "one read in flight per namespace");
        queue.finished("flood");
        assert_eq!(queue.next(any), Some(("flood".into(), "flood/1".into())));
        assert_eq!(queue.in_flight(), 2);
    }

    #[test]
    fn reads_are_bounded_and_stale_keys_are_skipped() {
        let mut queue = ReadQueue::new(2);
        for namespace in ["a", "b", "c"] {
            queue.push(namespace, format!("{namespace}/x"));
            queue.push(namespace, format!("{namespace}/x"));
        }
        queue.push("a", "a/y".to_string());
        queue.remove(&"b/x".to_string());
        let any = |_: &String| true;
        assert_eq!(queue.next(any), Some(("a".into(), "a/x".into())));
        assert_eq!(queue.next(any), Some(("c".into(), "c/x".into())));
        assert_eq!(queue.next(any), None, "two at once");
        queue.finished("c");
        assert_eq!(queue.next(|k: &String| k != "a/y"), None, "a is reading");
        queue.finished("a");
        assert_eq!(
            queue.next(|k: &String| k != "a/y"),
            None,
            "a/y is not wanted"
        );
        assert_eq!(queue.next(any), None, "and was dropped");
    }
}
