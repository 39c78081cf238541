//! A few values kept by key, most recently used last: the shape of the per-thread caches
//! of compiled design functions (validators, filter functions, render environments). A
//! value in use is taken out, so one call never shares it with another, and put back when
//! the call succeeded; one whose call failed is simply not put back.

/// At most `capacity` values, the oldest dropped first.
pub struct Recent<K, V> {
    capacity: usize,
    items: Vec<(K, V)>,
}

impl<K: PartialEq, V> Recent<K, V> {
    pub const fn new(capacity: usize) -> Recent<K, V> {
        Recent {
            capacity,
            items: Vec::new(),
        }
    }

    /// Takes out the value kept under `key`.
    pub fn take(&mut self, key: &K) -> Option<V> {
        self.take_where(|k, _| k == key)
    }

    /// Takes out the first value (with its key) that `wanted` accepts.
    pub fn take_where(&mut self, wanted: impl Fn(&K, &V) -> bool) -> Option<V> {
        let at = self.items.iter().position(|(k, v)| wanted(k, v))?;
        Some(self.items.remove(at).1)
    }

    /// Keeps `value` under `key` as the most recent, in place of any other under that key;
    /// the oldest goes when the cache is full.
    pub fn put(&mut self, key: K, value: V) {
        self.items.retain(|(k, _)| *k != key);
        if self.items.len() >= self.capacity {
            self.items.remove(0);
        }
        self.items.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn keeps_the_most_recent_and_one_value_per_key() {
        let mut r = Recent::new(2);
        r.put("a", 1);
        r.put("b", 2);
        r.put("a", 3);
        assert_eq!(r.take(&"a"), Some(3));
        assert_eq!(r.take(&"a"), None);
        r.put("a", 4);
        r.put("c", 5);
        assert_eq!(r.take(&"b"), None, "the oldest went");
        assert_eq!(r.take_where(|_, v| *v == 5), Some(5));
        assert_eq!(r.take(&"a"), Some(4));
    }
}
