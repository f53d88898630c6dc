"""`ddpdoctor attach`: diagnose a running DDP job that was not started under ddpdoctor (py-spy stacks)."""
