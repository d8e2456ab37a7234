"""How long a run will take, before it exists: predict gathers a config's item counts, rates,
load and learned error; arithmetic sums the parts; rates and error learn from this machine's
finished runs; text words it; remaining is a running job's time left."""
