from iipub.entry import main

main()
