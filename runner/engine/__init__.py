"""What runs in the engine process (runner _engine): its entry point, phases, stop controller, registry."""
