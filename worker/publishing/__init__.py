"""Publishing staged sink output to its targets: bookkeeping (book.py) and the publisher thread."""
