"""What real clusters share on the host machine: address claims, file locks and leases, the Docker engine and the
member image, and the interpreter that runs members."""
