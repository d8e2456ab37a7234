"""The Compare page: the verdict, reliability diagrams, groups and selective answering."""
