"""When to apply buffered updates: refresh scheduling under a response-time bound (003 ch. 2).

:mod:`~sparksub.scheduling.refresh` holds the model and the algorithms (pure Python, no Spark);
:mod:`~sparksub.scheduling.measure` times our operators per batch size and fits the cost functions f_i.
"""
