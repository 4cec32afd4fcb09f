//! The HTTPS client (filled by the client work of issue 37).
