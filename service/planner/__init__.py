"""What a search runs next, decided in plain Python: no Ray is imported here or below.

The engine (``hpsearch.tune``) asks this package and does what it says; the Python API
(``hpsearch.search``) asks it too, for the budget and the confirmation of the answer. Import
what you need from its module: importing the package loads none of them.
"""
