"""``python -m multikafka.coordinator``: run one coordinator replica."""

from multikafka.coordinator.cli import main

if __name__ == "__main__":
    main()
