mod net;
mod proxy;
