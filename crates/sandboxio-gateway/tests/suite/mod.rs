mod chain;
mod store;
