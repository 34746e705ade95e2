mod chain;
mod concurrency;
mod store;
