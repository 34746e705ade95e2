mod harness;
mod http;
mod proxy;
mod server;
mod subscribe;
