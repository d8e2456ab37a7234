"""What more than one page draws or reads: charts, words, session keys and process caches,
and the verdict and reliability sections that Compare shares with Monitor and Learn."""
