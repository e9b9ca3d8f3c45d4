"""FabricTwin services: four gRPC servers over cores that know nothing of gRPC."""
