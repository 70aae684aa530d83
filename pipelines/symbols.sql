-- The reference table pipelines/trades_windows.py joins its trades with
-- (sp.read.table_from_postgres("symbols", ...)): each producer symbol's sector.
-- On the compose stack:
--   docker-compose exec -T postgres psql -U sparkpoint -d sparkpoint < pipelines/symbols.sql
CREATE TABLE IF NOT EXISTS symbols (sym text PRIMARY KEY, sector text NOT NULL);
INSERT INTO symbols VALUES
  ('AAPL', 'Technology'), ('MSFT', 'Technology'), ('GOOG', 'Communication'), ('AMZN', 'Consumer'),
  ('NVDA', 'Technology'), ('META', 'Communication'), ('TSLA', 'Consumer'), ('IBM', 'Technology')
ON CONFLICT (sym) DO UPDATE SET sector = EXCLUDED.sector;
