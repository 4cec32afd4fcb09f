//! WLCG bearer tokens (filled by the token work of issue 37).
