"""The single-node broker: request handlers, topics, partitions, producer state."""
