"""The loop's ledger: `base` (rows, statuses and the `LedgerStore` Protocol), `codec`, and the
`sqlite` and `postgres` backends. Open it with `store.factory.open_ledger`."""
