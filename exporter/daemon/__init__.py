"""The long-running exporter: scheduled probes, engine scraping, reloads, around one aiohttp app."""
