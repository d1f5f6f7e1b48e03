//! Concurrent cache-line-blocked Bloom filter.
