"""What the user sees. ``report`` is the record of one build (every word a view shows),
``render`` its text and HTML, ``records`` the line magics' records, ``widget`` the report in a
notebook, ``bench`` the timing and occupancy views. Imported module by module: nothing here."""
